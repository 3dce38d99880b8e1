#include "codec/rate/search.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>

#include "codec/common/parallel.h"
#include "codec/rans/encoder.h"
#include "codec/rans/native_format.h"
#include "codec/rans/reference_format.h"

namespace epk::rate {

namespace {
constexpr std::size_t kBlockVectors = 16384;
}

std::vector<std::uint32_t> sample_rows(std::uint32_t rows, std::uint32_t padded_cols, std::uint64_t max_vectors) {
  const std::uint64_t vpr = std::max<std::uint32_t>(1, padded_cols / 8);
  const std::uint64_t sub = std::max<std::uint64_t>(1, std::min<std::uint64_t>(rows, max_vectors / vpr));
  std::vector<std::uint32_t> idx(rows);
  std::iota(idx.begin(), idx.end(), 0u);
  if (sub >= rows) return idx;
  std::mt19937_64 rng(std::uint64_t(rows) * kSampleSeedMultiplier + padded_cols);
  for (std::uint64_t i = 0; i < sub; ++i) {
    std::uniform_int_distribution<std::uint64_t> pick(i, rows - 1);
    std::swap(idx[i], idx[pick(rng)]);
  }
  idx.resize(sub);
  return idx;
}

model::FieldCounts quantize_counts(const float* x, std::size_t n, float scale, int threads) {
  model::FieldCounts total;
  std::mutex mu;
  parallel_for_blocks(n, kBlockVectors, threads, [&](std::size_t b, std::size_t e) {
    std::vector<std::uint8_t> c(e - b);
    std::vector<std::int32_t> f((e - b) * lattice::kFields);
    lattice::quantize_vectors(x + b * lattice::kDim, e - b, scale, c.data(), f.data());
    const model::FieldCounts part = model::count_fields(c.data(), f.data(), e - b);
    std::lock_guard<std::mutex> lock(mu);
    model::merge_counts(total, part);
  });
  return total;
}

void quantize_all(const float* x, std::size_t n, float scale, lattice::QuantizedFields& out, int threads) {
  out.resize(n);
  parallel_for_blocks(n, kBlockVectors, threads, [&](std::size_t b, std::size_t e) {
    lattice::quantize_vectors(x + b * lattice::kDim, e - b, scale, out.coset.data() + b,
                              out.fields.data() + b * lattice::kFields);
  });
}

double bisect_scale(const SampleCounts& counts, std::uint64_t sample_rows, std::uint32_t padded_cols,
                    double target_bpp, int prob_bits, std::uint32_t tile_symbols, int iterations) {
  const double weights = double(sample_rows) * padded_cols;
  double lo = kScaleLow;
  double hi = kScaleHigh;
  for (int it = 0; it < iterations; ++it) {
    const double mid = std::sqrt(lo * hi);
    const double bytes = model::estimate_stored_bytes(counts(float(mid)), sample_rows, prob_bits, tile_symbols);
    if (8.0 * bytes / weights > target_bpp) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return std::sqrt(lo * hi);
}

double bisect_scale(const float* sample, std::uint64_t sample_rows, std::uint32_t padded_cols, double target_bpp,
                    int prob_bits, std::uint32_t tile_symbols, int iterations, int threads) {
  const std::size_t n = std::size_t(sample_rows) * (padded_cols / 8);
  return bisect_scale([&](float s) { return quantize_counts(sample, n, s, threads); }, sample_rows, padded_cols,
                      target_bpp, prob_bits, tile_symbols, iterations);
}

namespace {

std::uint64_t stored_size(const StoredBytes& stored, const rans::EncodedTensor& t) {
  return stored ? stored(t) : rans::reference_quant_state_bytes(t);
}

}  // namespace

double calibrated_bpp(const model::FieldCounts& counts, std::uint64_t rows, std::uint32_t cols, int prob_bits,
                      std::uint32_t tile_symbols, const Calibration& cal) {
  const double coded = model::estimate_coded_bytes(counts, prob_bits, tile_symbols, cal.table_cost);
  return 8.0 * (coded * cal.coder_ratio + cal.fixed + cal.fixed_per_row * double(rows)) /
         (double(rows) * double(cols));
}

Calibration calibrate_scale(const SampleCounts& sample_counts, const SampleCode& code, std::uint64_t sample_rows,
                            std::uint32_t cols, double target_bpp, int prob_bits, std::uint32_t tile_symbols,
                            double scale, const StoredBytes& stored, rans::StreamProfile profile) {
  Calibration out;
  out.scale = scale;
  auto enc = code(float(scale));
  if (!enc) return out;
  const model::FieldCounts& counts = enc->counts;
  const rans::EncodedTensor& coded = enc->coded;
  double actual = 0.0;
  if (profile == rans::StreamProfile::kNative) {
    const rans::NativeSizes z = rans::native_sizes(coded);
    actual = double(coded.payload.size() * 2 + z.word_counts + z.states + z.tables);
    out.fixed_per_row = 2.0;
    out.table_cost = model::TableCost::kGammaCoded;
  } else {
    actual = double(coded.payload.size() * 2 + coded.states.size() * 4 + coded.offsets.size() * 4 +
                    coded.freq_tables.size() * 2);
  }
  const double modelled = model::estimate_coded_bytes(counts, prob_bits, tile_symbols, out.table_cost);
  if (!(modelled > 0.0)) return out;
  out.coder_ratio = actual / modelled;
  // Everything in the stored form that is not coded bytes: the row scales, the rest fixed.
  out.fixed = double(stored_size(stored, coded)) - actual - out.fixed_per_row * double(sample_rows);
  auto excess = [&](const model::FieldCounts& c) {
    return calibrated_bpp(c, sample_rows, cols, prob_bits, tile_symbols, out) - target_bpp;
  };
  double s0 = scale;
  double f0 = excess(counts);
  for (int step = 0; step < 2; ++step) {
    if (std::fabs(f0) < 2e-4 * target_bpp) break;
    const double s1 = f0 > 0 ? s0 * 1.02 : s0 / 1.02;  // a larger scale costs fewer bits
    const double f1 = excess(sample_counts(float(s1)));
    if (f1 == f0) break;
    out.slope = (f1 - f0) / (std::log(s1) - std::log(s0));
    double next = std::log(s0) + (std::log(s1) - std::log(s0)) * f0 / (f0 - f1);
    next = std::clamp(next, std::log(s0) - 0.2, std::log(s0) + 0.2);
    s0 = std::exp(next);
    if (step == 0) f0 = excess(sample_counts(float(s0)));
  }
  out.scale = s0;
  return out;
}

double measured_scale(const SampleCode& code, const StoredBytes& stored, std::uint64_t rows, std::uint32_t cols,
                      double target_bpp, double scale, double slope, double tolerance, int steps) {
  const double weights = double(rows) * double(cols);
  auto measure = [&](double s) -> std::optional<double> {
    auto enc = code(float(s));
    if (!enc) return std::nullopt;
    return 8.0 * double(stored_size(stored, enc->coded)) / weights;
  };
  const auto first = measure(scale);
  if (!first) return scale;
  double best_scale = scale, best = *first;
  double s0 = scale, f0 = *first;
  for (int step = 0; step < steps && std::fabs(f0 / target_bpp - 1.0) > tolerance; ++step) {
    const double s1 = std::exp(std::log(s0) + std::clamp((target_bpp - f0) / slope, -0.2, 0.2));
    const auto f1 = measure(s1);
    if (!f1) break;
    if (std::fabs(*f1 - target_bpp) < std::fabs(best - target_bpp)) {
      best_scale = s1;
      best = *f1;
    }
    // The measured rate is a step function of the scale: a flat or rising secant keeps the previous slope.
    if (*f1 != f0) {
      const double secant = (*f1 - f0) / (std::log(s1) - std::log(s0));
      if (secant < 0.0) slope = secant;
    }
    s0 = s1;
    f0 = *f1;
  }
  return best_scale;
}

Result<SampleCoded> code_sample(const float* sample, std::uint64_t sample_rows, std::uint32_t padded_cols,
                                std::uint32_t cols, float scale, int prob_bits, std::uint32_t tile_symbols,
                                int threads) {
  const std::size_t n = std::size_t(sample_rows) * (padded_cols / 8);
  lattice::QuantizedFields q;
  quantize_all(sample, n, scale, q, threads);
  SampleCoded out;
  out.counts = model::count_fields(q.coset.data(), q.fields.data(), n);
  rans::EncodeGeometry g{std::uint32_t(sample_rows), cols, std::uint32_t(prob_bits), tile_symbols, DType::kF32};
  EPK_TRY_ASSIGN(out.coded, rans::encode_fields(q, std::vector<float>(sample_rows, 1.0f), g, threads));
  return out;
}

Calibration calibrate_scale(const float* sample, std::uint64_t sample_rows, std::uint32_t padded_cols,
                            std::uint32_t cols, double target_bpp, int prob_bits, std::uint32_t tile_symbols,
                            double scale, int threads, const StoredBytes& stored, rans::StreamProfile profile) {
  const std::size_t n = std::size_t(sample_rows) * (padded_cols / 8);
  auto counts = [&](float s) { return quantize_counts(sample, n, s, threads); };
  auto code = [&](float s) {
    return code_sample(sample, sample_rows, padded_cols, cols, s, prob_bits, tile_symbols, threads);
  };
  return calibrate_scale(counts, code, sample_rows, cols, target_bpp, prob_bits, tile_symbols, scale, stored,
                         profile);
}

}  // namespace epk::rate
