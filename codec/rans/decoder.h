// The plain scalar decoder of a lattice-rans tensor: the oracle for the GPU decoder. It validates the stream's
// geometry and tables once, then decodes tiles independently; a tile that does not end with its read pointer at the
// tile start and every state back at 2^15 (or that runs out of words, or meets an empty table) is reported with its
// number and never written as if it were good.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "codec/common/dtype.h"
#include "codec/common/result.h"
#include "codec/lattice/quantize.h"
#include "codec/rans/stream.h"
#include "codec/rans/tile_fault.h"

namespace epk::rans {

// Output element types: kF32, kBF16, kF16, kF8E4M3, kF8E5M2 (saturated to the finite range) and kI8 (rounded half
// to even, saturated), as the reference's snap_to_container.
bool decode_output_supported(DType t);

// Checks everything about the stream that does not need decoding: shape and layout, tile count against offsets and
// states, monotone offsets ending at the payload size, table metadata (contiguous, alphabets within 2^pb, each table's
// frequencies summing to 2^pb, symbols within +-kMaxSymbolMagnitude, symbol counts consistent across tables), row
// scales finite and positive.
// name (the tensor) prefixes every message.
Status validate_stream(const LatticeRansStream& s, std::string_view name);

// Serving layouts rowwise:{int8, fp8_e4m3} (docs/LAYOUTS.md 3): one value q per element plus one fp32 scale per row,
// the weight being q * row_scale[row]. Every decoded coordinate is p = z + c/2 (z an integer, c the coset), so 2p is an
// integer with |2p| <= bound, the largest any of the stream's tables allows. With limit L (127 for int8, 448 for e4m3):
// gain = 1 when bound <= L, else float(L / bound); q = convert(float(2p) * gain) (int8: rounded half to even, clamped
// to +-127; e4m3: rounded to nearest even, saturated to +-448); row_scale = scale[row] * half_over_gain with
// half_over_gain = float(0.5 / gain). int8 is lossless when bound <= 127; e4m3 rounds only where |2p| > 16.
enum class RowwiseType : std::uint8_t { kInt8, kF8E4M3 };
struct RowwiseGain {
  std::int64_t bound = 1;
  float gain = 1.0f;
  float half_over_gain = 0.5f;
};
RowwiseGain rowwise_gain(const LatticeRansStream& s, RowwiseType type);

// A validated stream with its decode tables built once, for decoding many row ranges of one tensor (the tables take
// 17 * 2^prob_bits * 8 bytes). It keeps the view, not the bytes: the buffers must outlive the plan. Move-only.
class DecodePlan {
 public:
  static Result<DecodePlan> create(const LatticeRansStream& s, std::string_view name);
  DecodePlan(DecodePlan&&) noexcept;
  DecodePlan& operator=(DecodePlan&&) noexcept;
  DecodePlan(const DecodePlan&) = delete;
  DecodePlan& operator=(const DecodePlan&) = delete;
  ~DecodePlan();

  // As the free decode_rows below, without validating or building tables again.
  Status decode_rows(DType out_type, std::span<std::byte> out, std::uint32_t row_begin, std::uint32_t row_end,
                     int threads = 1, std::vector<TileFaultRecord>* faults = nullptr) const;
  // As the free decode_rowwise below.
  Status decode_rowwise(RowwiseType type, std::span<std::byte> values, std::span<float> row_scales,
                        std::uint32_t row_begin, std::uint32_t row_end, int threads = 1,
                        std::vector<TileFaultRecord>* faults = nullptr) const;
  const LatticeRansStream& stream() const;

  struct Impl;

 private:
  explicit DecodePlan(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Decodes rows [row_begin, row_end) into out: (row_end - row_begin) * cols elements of out_type, row-major, the
// logical columns only. Only the tiles covering those rows are decoded. On corrupt tiles returns kCorruptTile naming
// the tensor and the first bad tiles; every bad tile is appended to faults when given. threads >= 1.
Status decode_rows(const LatticeRansStream& s, std::string_view name, DType out_type, std::span<std::byte> out,
                   std::uint32_t row_begin, std::uint32_t row_end, int threads = 1,
                   std::vector<TileFaultRecord>* faults = nullptr);

// Whole tensor.
inline Status decode(const LatticeRansStream& s, std::string_view name, DType out_type, std::span<std::byte> out,
                     int threads = 1, std::vector<TileFaultRecord>* faults = nullptr) {
  return decode_rows(s, name, out_type, out, 0, s.rows, threads, faults);
}

// Decodes rows [row_begin, row_end) into the rowwise layout: values gets (row_end - row_begin) * cols bytes
// (row-major, logical columns), row_scales (row_end - row_begin) floats. Corrupt tiles as decode_rows.
Status decode_rowwise(const LatticeRansStream& s, std::string_view name, RowwiseType type, std::span<std::byte> values,
                      std::span<float> row_scales, std::uint32_t row_begin, std::uint32_t row_end, int threads = 1,
                      std::vector<TileFaultRecord>* faults = nullptr);

// Validates the stream, then decodes every tile without producing weights; returns the status of each bad tile
// (empty when all are good), or validate_stream's error.
Result<std::vector<TileFaultRecord>> check_tiles(const LatticeRansStream& s, std::string_view name, int threads = 1);

// Decodes the fields of every vector (the sym_min offsets restored): for tests and re-encoding.
Result<lattice::QuantizedFields> decode_fields(const LatticeRansStream& s, std::string_view name);

}  // namespace epk::rans
