// libFuzzer target: the safetensors reader (codec/safetensors/reader.h). The input is a .safetensors file. For every
// file the reader accepts, the properties its header comment promises are checked: each tensor's bytes lie inside the
// data section, hold exactly numel * bits / 8 bytes, tile it without holes or overlap, and find() returns each one.
#include <cstdint>

#include "codec/safetensors/reader.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace epk;
  static fuzz::InputFile file;
  auto f = safetensors::File::open(file.set(data, size));
  if (!f) return 0;
  const auto map = f->bytes_mapped();
  if (f->data_offset() > map.size()) fuzz::violated();
  const std::uint8_t* next = map.data() + f->data_offset();
  for (const auto& t : f->tensors()) {
    std::uint64_t numel = 0, nbytes = 0;
    if (!safetensors::shape_numel(t.shape, &numel) || !safetensors::tensor_nbytes(t.dtype, numel, &nbytes))
      fuzz::violated();
    if (t.data.size() != nbytes) fuzz::violated();
    if (t.data.size() > 0 && t.data.data() != next) fuzz::violated();  // in order, no holes, no overlap
    if (t.data.data() + t.data.size() > map.data() + map.size()) fuzz::violated();
    next += t.data.size();
    if (f->find(t.name) != &t) fuzz::violated();
  }
  if (next != map.data() + map.size()) fuzz::violated();  // the last tensor ends the file
  return 0;
}
