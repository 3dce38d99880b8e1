#include "codec/rate/search.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <numeric>
#include <random>

#include "codec/common/parallel.h"
#include "codec/rans/encoder.h"

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

double bisect_scale(const float* sample, std::uint64_t sample_rows, std::uint32_t padded_cols, double target_bpp,
                    int prob_bits, std::uint32_t tile_symbols, int iterations, int threads) {
  const std::size_t n = std::size_t(sample_rows) * (padded_cols / 8);
  const double weights = double(sample_rows) * padded_cols;
  double lo = kScaleLow;
  double hi = kScaleHigh;
  for (int it = 0; it < iterations; ++it) {
    const double mid = std::sqrt(lo * hi);
    const model::FieldCounts counts = quantize_counts(sample, n, float(mid), threads);
    const double bytes = model::estimate_stored_bytes(counts, sample_rows, prob_bits, tile_symbols);
    if (8.0 * bytes / weights > target_bpp) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return std::sqrt(lo * hi);
}

namespace {

// Fixed model terms of estimate_stored_bytes beyond the coded bytes, per the sample.
double fixed_bytes(std::uint64_t sample_rows, const model::FieldCounts& counts, int prob_bits,
                   std::uint32_t tile_symbols) {
  return model::estimate_stored_bytes(counts, sample_rows, prob_bits, tile_symbols) -
         model::estimate_coded_bytes(counts, prob_bits, tile_symbols);
}

}  // namespace

double calibrated_bpp(const model::FieldCounts& counts, std::uint64_t rows, double weights, int prob_bits,
                      std::uint32_t tile_symbols, double coder_ratio) {
  const double coded = model::estimate_coded_bytes(counts, prob_bits, tile_symbols);
  return 8.0 * (coded * coder_ratio + fixed_bytes(rows, counts, prob_bits, tile_symbols)) / weights;
}

Calibration calibrate_scale(const float* sample, std::uint64_t sample_rows, std::uint32_t padded_cols,
                            double target_bpp, int prob_bits, std::uint32_t tile_symbols, double scale,
                            int threads) {
  Calibration out;
  out.scale = scale;
  const std::size_t n = std::size_t(sample_rows) * (padded_cols / 8);
  const double target_bytes = target_bpp * double(sample_rows) * padded_cols / 8.0;
  lattice::QuantizedFields q;
  quantize_all(sample, n, float(scale), q, threads);
  const model::FieldCounts counts = model::count_fields(q.coset.data(), q.fields.data(), n);
  rans::EncodeGeometry g{std::uint32_t(sample_rows), padded_cols, std::uint32_t(prob_bits), tile_symbols, DType::kF32};
  auto enc = rans::encode_fields(q, std::vector<float>(sample_rows, 1.0f), g, threads);
  if (!enc) return out;
  const double actual = double(enc->payload.size() * 2 + enc->states.size() * 4 + enc->offsets.size() * 4 +
                               enc->freq_tables.size() * 2);
  const double modelled = model::estimate_coded_bytes(counts, prob_bits, tile_symbols);
  if (!(modelled > 0.0)) return out;
  const double ratio = actual / modelled;
  out.coder_ratio = ratio;
  const double weights = double(sample_rows) * padded_cols;
  auto excess = [&](const model::FieldCounts& c) {
    return model::estimate_coded_bytes(c, prob_bits, tile_symbols) * ratio +
           fixed_bytes(sample_rows, c, prob_bits, tile_symbols) - target_bytes;
  };
  double s0 = scale;
  double f0 = excess(counts);
  for (int step = 0; step < 2; ++step) {
    if (std::fabs(f0) < 1e-4 * target_bytes) break;
    const double s1 = f0 > 0 ? s0 * 1.02 : s0 / 1.02;  // a larger scale costs fewer bits
    const double f1 = excess(quantize_counts(sample, n, float(s1), threads));
    if (f1 == f0) break;
    out.slope = 8.0 * (f1 - f0) / weights / (std::log(s1) - std::log(s0));
    double next = std::log(s0) + (std::log(s1) - std::log(s0)) * f0 / (f0 - f1);
    next = std::clamp(next, std::log(s0) - 0.2, std::log(s0) + 0.2);
    s0 = std::exp(next);
    if (step == 0) f0 = excess(quantize_counts(sample, n, float(s0), threads));
  }
  out.scale = s0;
  return out;
}

}  // namespace epk::rate
