// libFuzzer target: the .epk container reader (docs/FORMAT.md) and every encoding's reader behind it.
// The input is an .epk file. Its header, index and metadata checksums (and header.file_size) are recomputed before
// it is opened, so mutations reach the index and metadata parsers instead of stopping at rule 7.2-7.5. Each tensor
// the reader accepts is then read as the tools read it: buffer hashes, inspect's per-encoding parse, and a decode to
// F32 (lattice-rans through the scalar decoder, intq through dequantize_intq), bounded to 4 Mi elements.
#include <cstdint>
#include <cstring>
#include <vector>

#include "codec/common/bytes.h"
#include "codec/common/checksum.h"
#include "codec/container/format.h"
#include "codec/container/reader.h"
#include "codec/decode/decode_tensor.h"
#include "codec/layouts/intq_io.h"
#include "codec/rans/container_io.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace epk;
namespace h = container::header;

void store_u64(std::uint8_t* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = std::uint8_t(v >> (8 * i));
}

// Rewrites the derived header fields so that only the fields the fuzzer chose decide what the reader refuses.
void fix_checksums(std::vector<std::uint8_t>& f) {
  if (f.size() < container::kHeaderSize) return;
  std::uint8_t* p = f.data();
  store_u64(p + h::kFileSizeAt, f.size());
  auto region_sum = [&](std::size_t off_at, std::size_t size_at, std::size_t sum_at) {
    const std::uint64_t off = load_le<std::uint64_t>(p + off_at), size = load_le<std::uint64_t>(p + size_at);
    if (off <= f.size() && size <= f.size() - off)
      store_u64(p + sum_at, xxh3_64(std::span<const std::uint8_t>(p + off, size)));
  };
  region_sum(h::kIndexOffsetAt, h::kIndexSizeAt, h::kIndexChecksumAt);
  region_sum(h::kMetadataOffsetAt, h::kMetadataSizeAt, h::kMetadataChecksumAt);
  store_u64(p + h::kHeaderChecksumAt, xxh3_64(std::span<const std::uint8_t>(p, h::kHeaderChecksumAt)));
}

constexpr std::uint64_t kMaxDecodedElements = std::uint64_t(1) << 22;

void read_tensor(const container::Reader& r, const container::TensorEntry& t) {
  (void)r.verify(t);
  for (std::size_t i = 0; i < t.buffers.size(); ++i) {
    auto b = r.buffer(t, i);
    if (b.size() != t.buffers[i].size) fuzz::violated();  // the reader checked every buffer against the file
  }
  switch (t.encoding) {
    case container::Encoding::kLatticeRans: {
      rans::LatticeRansStream s;
      rans::EncodingInfo info;
      (void)rans::parse_entry_params(r, t, &s, &info);
      auto stored = rans::from_container(r, t);
      if (stored && t.element_count() <= kMaxDecodedElements) (void)rans::check_tiles(stored->stream, t.name);
      break;
    }
    case container::Encoding::kIntq:
      (void)layouts::intq::kind_of(r, t);
      (void)layouts::intq::footprint_of_entry(r, t);
      (void)layouts::intq::code_info(r, t);
      break;
    default:
      break;
  }
  if (t.element_count() <= kMaxDecodedElements && decode::can_decode(t, DType::kF32)) {
    std::vector<std::uint8_t> out(decode::decoded_bytes(t, DType::kF32));
    (void)decode::decode_tensor(r, t, DType::kF32, out);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static fuzz::InputFile file;
  std::vector<std::uint8_t> bytes(data, data + size);
  fix_checksums(bytes);
  auto reader = container::Reader::open(file.set(bytes.data(), bytes.size()));
  if (!reader) return 0;
  for (const auto& t : reader->tensors()) {
    if (reader->find(t.name) != &t) fuzz::violated();  // names are unique (rule 5.2)
    read_tensor(*reader, t);
  }
  return 0;
}
