// libFuzzer target: the GGUF reader (codec/layouts/gguf.h) and what `epk import` does with a parsed file. The input
// is a .gguf file: parsed, every key's value (array elements included) read back, every tensor's bytes checked to lie
// in the input, dequantized (up to 1 Mi elements) and stored as an intq tensor the way import stores it.
#include <cstdint>

#include "codec/layouts/gguf.h"
#include "codec/layouts/intq_io.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace epk::layouts;

void walk(const gguf::Value& v, int depth) {
  if (v.type != gguf::ValueType::kArray || depth > 4) return;
  const std::uint64_t n = v.count < 64 ? v.count : 64;
  for (std::uint64_t i = 0; i < n; ++i) walk(v.at(i), depth + 1);
  if (v.count > 0) walk(v.at(v.count - 1), depth + 1);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::uint8_t> input(data, size);
  auto f = gguf::File::parse(input, "fuzz.gguf");
  if (!f) return 0;
  for (const auto& kv : f->kvs()) walk(kv.value, 0);
  for (const auto& t : f->tensors()) {
    if (f->find_tensor(t.name) == nullptr) epk::fuzz::violated();
    auto bytes = f->tensor_bytes(t);
    if (bytes.size() != t.n_bytes) epk::fuzz::violated();
    if (bytes.size() > 0 && (bytes.data() < data || bytes.data() + bytes.size() > data + size)) epk::fuzz::violated();
    if (t.n_elements > (std::uint64_t(1) << 20)) continue;
    (void)gguf::dequantize(t.type, bytes, t.n_elements);
    (void)intq::encode_gguf(t, bytes, std::string(t.name));
  }
  return 0;
}
