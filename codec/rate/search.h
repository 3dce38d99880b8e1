// Target-rate scale search: geometric bisection of the lattice scale on a fixed sample of whole rows, priced by the
// size model (codec/model) instead of encoding, as the reference's eager backend does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "codec/lattice/quantize.h"
#include "codec/model/tables.h"

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

// Beyond the reference: its size model prices symbols at their cross-entropy, but a 32-bit rANS state renormalised
// at 2^15 loses a little to the coder itself (about 0.4% of the payload at 11 probability bits, 0.9% at 12), so its
// stored rates land above the target. calibrate_scale encodes the sample at `scale`, takes the ratio of real to
// modelled coded bytes, and moves the scale by secant steps (in log scale, on the sample, at most 2) until the
// model times that ratio meets the target. Returns scale unchanged when the sample cannot be coded at prob_bits.
struct Calibration {
  double scale = 0.0;
  double coder_ratio = 1.0;          // real / modelled coded bytes
  double slope = -1.0 / 0.6931471805599453;  // d(bpp) / d(ln scale), measured by the secant when it ran
};
Calibration calibrate_scale(const float* sample, std::uint64_t sample_rows, std::uint32_t padded_cols,
                            double target_bpp, int prob_bits, std::uint32_t tile_symbols, double scale, int threads);

// Modelled bits per weight of counts over `weights` weights (padded), the coded part scaled by coder_ratio.
double calibrated_bpp(const model::FieldCounts& counts, std::uint64_t rows, double weights, int prob_bits,
                      std::uint32_t tile_symbols, double coder_ratio);

}  // namespace epk::rate
