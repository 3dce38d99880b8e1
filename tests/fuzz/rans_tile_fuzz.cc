// libFuzzer target: the lattice-rans tile decoder (codec/rans/decoder.h). The input is a stream in the framing of
// rans_frame.h. The decoder must refuse a bad stream with an error or report its bad tiles, never read or write
// outside its buffers; checked for every stream validate_stream accepts (up to 2^16 vectors):
//   - check_tiles, a whole-tensor F32 decode and a rowwise int8 decode report the same bad tiles;
//   - a stream with no bad tile decodes without error, and the F32 decode of a row range equals those rows of the
//     whole tensor.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "codec/rans/decoder.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/rans_frame.h"

namespace {

using namespace epk;
using fuzz::violated;

std::vector<std::uint32_t> tiles_of(std::vector<rans::TileFaultRecord> v) {
  std::vector<std::uint32_t> out;
  for (const auto& s : v) out.push_back(s.tile);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto t = fuzz::unframe_stream(data, size);
  if (!t) return 0;
  const rans::LatticeRansStream s = t->view();
  if (!rans::validate_stream(s, "fuzz")) {
    if (rans::check_tiles(s, "fuzz")) violated();  // check_tiles validates first
    return 0;
  }
  if (s.vectors() > (std::uint64_t(1) << 16)) return 0;
  auto checked = rans::check_tiles(s, "fuzz");
  if (!checked) violated();
  const auto bad = tiles_of(*checked);

  const std::size_t n = std::size_t(s.rows) * s.cols;
  std::vector<float> all(n);
  std::vector<rans::TileFaultRecord> faults;
  auto st = rans::decode(s, "fuzz", DType::kF32, {reinterpret_cast<std::byte*>(all.data()), n * 4}, 1, &faults);
  if (bool(st) != bad.empty() || tiles_of(faults) != bad) violated();

  std::vector<std::uint8_t> values(n);
  std::vector<float> row_scales(s.rows);
  faults.clear();
  st = rans::decode_rowwise(s, "fuzz", rans::RowwiseType::kInt8, {reinterpret_cast<std::byte*>(values.data()), n},
                            row_scales, 0, s.rows, 1, &faults);
  if (bool(st) != bad.empty() || tiles_of(faults) != bad) violated();

  if (bad.empty() && s.rows >= 2) {
    const std::uint32_t begin = s.rows / 3, end = s.rows - s.rows / 4;
    std::vector<float> part(std::size_t(end - begin) * s.cols);
    st = rans::decode_rows(s, "fuzz", DType::kF32, {reinterpret_cast<std::byte*>(part.data()), part.size() * 4},
                           begin, end);
    if (!st) violated();
    if (std::memcmp(part.data(), all.data() + std::size_t(begin) * s.cols, part.size() * 4) != 0) violated();
  }
  return 0;
}
