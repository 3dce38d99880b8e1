// Calibrated encode time on the CPU (docs/measurements/calibration.md): a ROWS x COLS Gaussian layer at RATE bpp,
// plain and with a correlated synthetic H (factor, feedback rounding, H-weighted refit), each timed, with the
// H-weighted relative errors and stored rates. Usage: calibrated_encode_bench [ROWS COLS RATE THREADS] (default
// 10240 3840 4 2).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "codec/rans/decoder.h"
#include "codec/rans/reference_format.h"
#include "codec/rate/calibration.h"
#include "codec/rate/encode.h"

using namespace epk;

int main(int argc, char** argv) {
  const std::uint32_t rows = argc > 1 ? std::uint32_t(std::atoi(argv[1])) : 10240;
  const std::uint32_t cols = argc > 2 ? std::uint32_t(std::atoi(argv[2])) : 3840;
  const double rate = argc > 3 ? std::atof(argv[3]) : 4.0;
  const int threads = argc > 4 ? std::atoi(argv[4]) : 2;
  std::mt19937 rng(1);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> w(std::size_t(rows) * cols);
  for (auto& v : w) v = 0.02f * n(rng);
  // H = B B^T + diag, B cols x 64 with log-normal column scales: a low-rank, anisotropic input covariance.
  const std::uint32_t k = 64;
  std::vector<float> scale(cols), b(std::size_t(cols) * k);
  for (auto& s : scale) s = std::exp(n(rng));
  for (std::uint32_t i = 0; i < cols; ++i)
    for (std::uint32_t j = 0; j < k; ++j) b[std::size_t(i) * k + j] = scale[i] * n(rng);
  std::vector<float> h(std::size_t(cols) * cols);
  for (std::uint32_t i = 0; i < cols; ++i)
    for (std::uint32_t j = 0; j <= i; ++j) {
      double acc = i == j ? 0.1 * scale[i] * scale[i] : 0.0;
      for (std::uint32_t m = 0; m < k; ++m) acc += double(b[std::size_t(i) * k + m]) * b[std::size_t(j) * k + m];
      h[std::size_t(i) * cols + j] = h[std::size_t(j) * cols + i] = float(acc);
    }
  const rate::HessianView hv{h, cols, 1.0};
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(w.data()), w.size() * 4);
  for (const bool calibrated : {false, true}) {
    rate::EncodeOptions o;
    o.target_bpp = rate;
    o.threads = threads;
    o.calibration = calibrated ? &hv : nullptr;
    const auto t0 = std::chrono::steady_clock::now();
    auto e = rate::encode(bytes, rows, cols, DType::kF32, o, "w");
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!e) {
      std::fprintf(stderr, "%s\n", e.error().to_string().c_str());
      return 1;
    }
    std::vector<float> d(w.size());
    if (!rans::decode(e->view(), "w", DType::kF32, {reinterpret_cast<std::byte*>(d.data()), d.size() * 4}, threads))
      return 1;
    const double err = rate::h_weighted_relative_error(w, d, rows, hv, threads);
    const double bpp = 8.0 * double(rans::reference_quant_state_bytes(*e)) / (double(rows) * cols);
    std::printf("%ux%u at %.2f bpp, %d threads, %-10s encode %7.2f s, stored %.4f bpp, H-weighted rel. error %.5f\n",
                rows, cols, rate, threads, calibrated ? "calibrated" : "plain", s, bpp, err);
  }
  return 0;
}
