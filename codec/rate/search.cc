#include "codec/rate/search.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <numeric>
#include <random>

#include "codec/common/parallel.h"

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

}  // namespace epk::rate
