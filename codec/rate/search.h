// Target-rate scale search: geometric bisection of the lattice scale on a fixed sample of whole rows, priced by the
// size model (codec/model) instead of encoding, as the reference's eager backend does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "codec/common/result.h"
#include "codec/rans/encoded_tensor.h"

#include "codec/lattice/quantize.h"
#include "codec/model/tables.h"
#include "codec/rate/encode.h"

namespace epk::rate {

inline constexpr double kScaleLow = 1e-3;
inline constexpr double kScaleHigh = 8.0;
inline constexpr std::uint64_t kSampleSeedMultiplier = 1000003;

// Rows for the search: all rows when max_vectors // (padded_cols/8) >= rows, else that many (at least one) drawn by
// a permutation seeded with rows * 1000003 + cols (cols: padded). The seed follows the reference; the generator is
// ours (std::mt19937_64), so the rows drawn differ from torch.randperm's.
std::vector<std::uint32_t> sample_rows(std::uint32_t rows, std::uint32_t padded_cols, std::uint64_t max_vectors);

// Counts of the fields of n normalised vectors quantised at scale, without keeping the fields.
model::FieldCounts quantize_counts(const float* x, std::size_t n, float scale, int threads);
// Quantises n vectors into out (resized to n).
void quantize_all(const float* x, std::size_t n, float scale, lattice::QuantizedFields& out, int threads);

// Bisects s over [1e-3, 8] for `iterations` steps: a midpoint sqrt(lo * hi) whose estimated rate
// 8 * bytes / (sample_rows * padded_cols) exceeds the target raises lo, else lowers hi. Returns sqrt(lo * hi).
double bisect_scale(const float* sample, std::uint64_t sample_rows, std::uint32_t padded_cols, double target_bpp,
                    int prob_bits, std::uint32_t tile_symbols, int iterations, int threads);

// The sample's two operations, so that the search runs the same on any backend (the CPU functions here, or a
// device): the counts of the sample quantised at a scale, and the sample quantised at a scale and coded as
// rans::encode_fields codes it (row scales all 1, the logical columns cols, dtype F32), with its counts.
using SampleCounts = std::function<model::FieldCounts(float scale)>;
struct SampleCoded {
  model::FieldCounts counts;
  rans::EncodedTensor coded;
};
using SampleCode = std::function<Result<SampleCoded>(float scale)>;
// The CPU's SampleCode: the sample_rows x padded_cols sample quantised at scale and coded.
Result<SampleCoded> code_sample(const float* sample, std::uint64_t sample_rows, std::uint32_t padded_cols,
                                std::uint32_t cols, float scale, int prob_bits, std::uint32_t tile_symbols,
                                int threads);
double bisect_scale(const SampleCounts& counts, std::uint64_t sample_rows, std::uint32_t padded_cols,
                    double target_bpp, int prob_bits, std::uint32_t tile_symbols, int iterations);

// Beyond the reference: its size model prices symbols at their cross-entropy, but a 32-bit rANS state renormalised
// at 2^15 loses a little to the coder itself (about 0.4% of the payload at 11 probability bits, 0.9% at 12), so its
// stored rates land above the target. calibrate_scale encodes the sample at `scale`, takes the ratio of real to
// modelled coded bytes, and moves the scale by secant steps (in log scale, on the sample, at most 2) until the
// model times that ratio meets the target. Returns scale unchanged when the sample cannot be coded at prob_bits.
struct Calibration {
  double scale = 0.0;
  double coder_ratio = 1.0;          // real / modelled coded bytes
  double fixed_per_row = 4.0;        // real bytes beside the coded ones: row scales ...
  double fixed = 856.0;              // ... and the rest (tables metadata, layout, JSON header, alignment)
  double slope = -1.0 / 0.6931471805599453;  // d(bpp) / d(ln scale), measured by the secant when it ran
  model::TableCost table_cost = model::TableCost::kTwoBytesAnEntry;  // the profile's (calibrate_scale's `profile`)
};
// The target is met over the logical columns (cols), as the reference's actual_bpp counts, and with the real
// overhead of the stored form (`stored` of the coded sample, less its coded bytes and row scales; the reference's
// blob when `stored` is empty) instead of the model's fixed 856 bytes. `profile` says how the coded bytes and the row
// scales are stored: the native profile's packed states and word counts grow with the tensor as its payload does, so
// the coder ratio takes them; its gamma-coded tables do not (a sample's tables are about the whole tensor's), so the
// model prices them as stored (model::TableCost); its row scales take 2 bytes.
Calibration calibrate_scale(const float* sample, std::uint64_t sample_rows, std::uint32_t padded_cols,
                            std::uint32_t cols, double target_bpp, int prob_bits, std::uint32_t tile_symbols,
                            double scale, int threads, const StoredBytes& stored = {},
                            rans::StreamProfile profile = rans::StreamProfile::kReference);
// The same on a backend's sample operations.
Calibration calibrate_scale(const SampleCounts& counts, const SampleCode& code, std::uint64_t sample_rows,
                            std::uint32_t cols, double target_bpp, int prob_bits, std::uint32_t tile_symbols,
                            double scale, const StoredBytes& stored = {},
                            rans::StreamProfile profile = rans::StreamProfile::kReference);

// When the sample is the whole tensor, coding it codes the tensor's own fields (the row refit changes the row
// scales, 4 bytes a row either way, not the fields), so its stored rate can be measured instead of modelled:
// secant steps in log scale (at most `steps`, each at most 0.2, from the slope `slope` until two points are
// measured) on 8 * stored(code(s)) / (rows * cols), stopping within `tolerance` (relative) of the target. Returns
// the scale measured closest to the target (`scale` itself when it cannot be coded). Only for a tensor whose fields
// are the plain quantisation (no ECVQ, no row RDO).
double measured_scale(const SampleCode& code, const StoredBytes& stored, std::uint64_t rows, std::uint32_t cols,
                      double target_bpp, double scale, double slope, double tolerance, int steps);

// Bits per logical weight (rows * cols) of counts under the calibration.
double calibrated_bpp(const model::FieldCounts& counts, std::uint64_t rows, std::uint32_t cols, int prob_bits,
                      std::uint32_t tile_symbols, const Calibration& cal);

}  // namespace epk::rate
