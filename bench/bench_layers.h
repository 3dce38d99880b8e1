// Layers and the NF4 yardstick shared by the codec benchmarks (codec_bench, codec_overhead_bench).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace epk::bench {

// "gauss" and "student" rows carry a log-normal row scale (sigma 1), as trained layers do; "iid" rows are plain
// N(0,1) * 0.02, the case the rate-distortion bound (6.25% relative L2 at 4 bpp) is stated for.
inline std::vector<float> make_layer(std::uint32_t rows, std::uint32_t cols, const std::string& dist,
                                     std::uint64_t seed) {
  const bool student = dist == "student";
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::chi_squared_distribution<float> chi(3.0f);
  std::vector<float> w(std::size_t(rows) * cols);
  for (std::uint32_t r = 0; r < rows; ++r) {
    const float row_scale = dist == "iid" ? 0.02f : 0.02f * std::exp(n(rng));
    for (std::uint32_t c = 0; c < cols; ++c) {
      float v = n(rng);
      if (student) v /= std::sqrt(chi(rng) / 3.0f);
      w[std::size_t(r) * cols + c] = v * row_scale;
    }
  }
  return w;
}

// NF4 (bitsandbytes' code book, blocks of 64 along the row, fp32 absmax: 4.5 bits per weight): relative L2 error.
inline double nf4_error(const std::vector<float>& w, std::uint32_t cols) {
  static const float kCode[16] = {-1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
                                  -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
                                  0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f,
                                  0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,
                                  0.7229568362236023f, 1.0f};
  double err = 0, energy = 0;
  const std::size_t rows = w.size() / cols;
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t b = 0; b < cols; b += 64) {
      const std::size_t e = std::min<std::size_t>(cols, b + 64);
      float absmax = 0;
      for (std::size_t i = b; i < e; ++i) absmax = std::max(absmax, std::fabs(w[r * cols + i]));
      for (std::size_t i = b; i < e; ++i) {
        const float x = w[r * cols + i];
        float q = 0;
        if (absmax > 0) {
          const float n = x / absmax;
          float best = 1e30f;
          for (float c : kCode) {
            if (std::fabs(n - c) < best) {
              best = std::fabs(n - c);
              q = c * absmax;
            }
          }
        }
        err += double(x - q) * double(x - q);
        energy += double(x) * x;
      }
    }
  }
  return std::sqrt(err / energy);
}

// rows * cols float32 values from a raw file; false when the file is short or missing.
inline bool read_f32(const std::string& path, std::vector<float>& w) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  const bool ok = std::fread(w.data(), 4, w.size(), f) == w.size();
  std::fclose(f);
  return ok;
}

}  // namespace epk::bench
