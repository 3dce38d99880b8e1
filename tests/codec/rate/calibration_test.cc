// Calibrated encoding: the statistics reader's refusals, and Hessian-aware rounding against the plain encoder at the
// same stored rate on synthetic layers whose H is known.
#include "codec/rate/calibration.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "codec/lattice/e8.h"
#include "codec/model/tables.h"
#include "codec/rans/decoder.h"
#include "codec/rans/reference_format.h"
#include "codec/rate/encode.h"
#include "codec/rate/feedback.h"
#include "codec/rate/output_error.h"
#include "codec/rate/simd.h"
#include "codec/safetensors/writer.h"

namespace epk::rate {
namespace {

struct Stat {
  std::string name;
  DType dtype;
  std::vector<std::uint64_t> shape;
  std::vector<std::uint8_t> bytes;
};

template <class T>
Stat stat(std::string name, std::vector<std::uint64_t> shape, const std::vector<T>& v, DType dtype) {
  Stat s{std::move(name), dtype, std::move(shape), std::vector<std::uint8_t>(v.size() * sizeof(T))};
  std::memcpy(s.bytes.data(), v.data(), s.bytes.size());
  return s;
}

std::string write_stats(const std::string& file, const std::vector<Stat>& stats) {
  const std::string path = ::testing::TempDir() + "/" + file;
  std::vector<safetensors::TensorSpec> specs;
  for (const auto& s : stats) specs.push_back({s.name, s.dtype, s.shape});
  auto w = safetensors::Writer::create(path, specs, {}, safetensors::Order::kAsDeclared);
  EXPECT_TRUE(w.has_value());
  for (const auto& s : stats) EXPECT_TRUE(w->write(s.name, s.bytes).has_value());
  EXPECT_TRUE(w->finish().has_value());
  return path;
}

// H = X^T X of `tokens` inputs mixed by a random map (correlated: `mixes` random terms per coordinate) whose
// coordinates then have log-normal scales, one per run of `scale_run` coordinates (8: one per E8 block).
std::vector<float> anisotropic_h(std::uint32_t cols, std::uint32_t tokens, std::uint32_t seed,
                                 std::uint32_t scale_run = 1, int mixes = 4) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> run_scale((cols + scale_run - 1) / scale_run), mix(std::size_t(cols) * cols, 0.0f);
  for (auto& s : run_scale) s = std::exp(1.5f * n(rng));
  for (std::uint32_t i = 0; i < cols; ++i) {
    mix[std::size_t(i) * cols + i] = 1.0f;
    for (int k = 0; k < mixes; ++k) mix[std::size_t(i) * cols + rng() % cols] += 0.5f * n(rng);
  }
  std::vector<double> h(std::size_t(cols) * cols, 0.0);
  std::vector<float> z(cols), x(cols);
  for (std::uint32_t t = 0; t < tokens; ++t) {
    for (auto& v : z) v = n(rng);
    for (std::uint32_t j = 0; j < cols; ++j) {
      double acc = 0;
      for (std::uint32_t i = 0; i < cols; ++i) acc += double(z[i]) * mix[std::size_t(i) * cols + j];
      x[j] = float(acc) * run_scale[j / scale_run];
    }
    for (std::uint32_t i = 0; i < cols; ++i)
      for (std::uint32_t j = 0; j < cols; ++j) h[std::size_t(i) * cols + j] += double(x[i]) * x[j];
  }
  return std::vector<float>(h.begin(), h.end());
}

std::vector<float> layer(std::uint32_t rows, std::uint32_t cols, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> w(std::size_t(rows) * cols);
  for (std::uint32_t r = 0; r < rows; ++r) {
    const float s = 0.02f * std::exp(0.3f * n(rng));
    for (std::uint32_t c = 0; c < cols; ++c) w[std::size_t(r) * cols + c] = n(rng) * s;
  }
  return w;
}

std::span<const std::byte> bytes_of(const std::vector<float>& w) {
  return {reinterpret_cast<const std::byte*>(w.data()), w.size() * 4};
}

std::vector<float> decode_f32(const rans::EncodedTensor& e) {
  std::vector<float> out(std::size_t(e.rows) * e.cols);
  auto st = rans::decode(e.view(), "w", DType::kF32, {reinterpret_cast<std::byte*>(out.data()), out.size() * 4});
  EXPECT_TRUE(st.has_value());
  return out;
}

double stored_bpp(const rans::EncodedTensor& e) {
  return 8.0 * double(rans::reference_quant_state_bytes(e)) / (double(e.rows) * e.cols);
}

struct Outcome {
  double plain_err, calib_err, plain_bpp, calib_bpp;
};

Outcome compare(const std::vector<float>& w, std::uint32_t rows, std::uint32_t cols, const HessianView& hv,
                double target, std::uint64_t max_vectors = 262144) {
  EncodeOptions o;
  o.target_bpp = target;
  o.threads = 2;
  o.search_max_vectors = max_vectors;
  auto plain = encode(bytes_of(w), rows, cols, DType::kF32, o, "w");
  o.calibration = &hv;
  auto calib = encode(bytes_of(w), rows, cols, DType::kF32, o, "w");
  EXPECT_TRUE(plain.has_value() && calib.has_value());
  if (!plain || !calib) return {};
  return {h_weighted_relative_error(w, decode_f32(*plain), rows, hv, 2),
          h_weighted_relative_error(w, decode_f32(*calib), rows, hv, 2), stored_bpp(*plain), stored_bpp(*calib)};
}

// The factor in its plain form, row by row (Cholesky-Banachiewicz; L^-1 as an axpy of earlier rows), one thread, for
// the blocks rounded in `order`: the reference make_feedback_factor's column-parallel form must equal bit for bit.
std::vector<float> reference_factor(const std::vector<float>& h, std::size_t n,
                                    const std::vector<std::uint32_t>& order) {
  auto dot = [](const double* a, const double* b, std::size_t len) {  // the encoder's order: four accumulators
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    std::size_t i = 0;
    for (; i + 4 <= len; i += 4) {
      s0 += a[i] * b[i];
      s1 += a[i + 1] * b[i + 1];
      s2 += a[i + 2] * b[i + 2];
      s3 += a[i + 3] * b[i + 3];
    }
    for (; i < len; ++i) s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
  };
  std::vector<std::uint8_t> dead(n);
  double diag_sum = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    dead[i] = h[i * n + i] == 0.0f;
    diag_sum += dead[i] ? 1.0 : double(h[i * n + i]);
  }
  const double damp = kFeedbackDamping * diag_sum / double(n);
  std::vector<double> a(n * n);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j <= i; ++j) {
      const std::size_t hi = std::size_t(order[(n - 1 - i) / 8]) * 8 + (n - 1 - i) % 8;
      const std::size_t hj = std::size_t(order[(n - 1 - j) / 8]) * 8 + (n - 1 - j) % 8;
      double v = 0.5 * (double(h[hi * n + hj]) + double(h[hj * n + hi]));
      if (i == j) v = (dead[hi] ? 1.0 : v) + damp;
      a[i * n + j] = v;
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    double* li = &a[i * n];
    for (std::size_t j = 0; j < i; ++j) li[j] = (li[j] - dot(li, &a[j * n], j)) / a[j * n + j];
    li[i] = std::sqrt(li[i] - dot(li, li, i));
  }
  std::vector<double> m(n * n, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    double* mi = &m[i * n];
    for (std::size_t k = 0; k < i; ++k)
      for (std::size_t j = 0; j <= k; ++j) mi[j] -= a[i * n + k] * m[k * n + j];
    mi[i] += 1.0;
    const double inv = 1.0 / a[i * n + i];
    for (std::size_t j = 0; j <= i; ++j) mi[j] *= inv;
  }
  std::vector<float> f(n * n, 0.0f);
  std::vector<double> u(8 * n);
  for (std::size_t b0 = 0; b0 + 8 < n; b0 += 8) {
    for (std::size_t k = 0; k < 8; ++k)
      for (std::size_t j = b0; j < n; ++j) u[k * n + j] = m[(n - 1 - (b0 + k)) * n + (n - 1 - j)];
    for (std::size_t kk = 8; kk-- > 0;) {
      for (std::size_t mm = kk + 1; mm < 8; ++mm)
        for (std::size_t j = b0 + 8; j < n; ++j) u[kk * n + j] -= u[kk * n + b0 + mm] * u[mm * n + j];
      const double inv = 1.0 / u[kk * n + b0 + kk];
      for (std::size_t j = b0 + 8; j < n; ++j) u[kk * n + j] *= inv;
    }
    for (std::size_t k = 0; k < 8; ++k)
      for (std::size_t j = b0 + 8; j < n; ++j) f[(b0 + k) * n + j] = float(u[k * n + j]);
  }
  return f;
}

// The blocks' order: full blocks by decreasing sum of diag(H), ties in stored order, a partial last block last.
void expect_block_order(const std::vector<float>& h, std::uint32_t cols, const std::vector<std::uint32_t>& order) {
  const std::uint32_t full = cols / 8;
  ASSERT_EQ(order.size(), (cols + 7) / 8);
  std::vector<std::uint8_t> seen(order.size(), 0);
  for (const std::uint32_t b : order) {
    ASSERT_LT(b, order.size());
    EXPECT_EQ(seen[b]++, 0u) << "block " << b << " twice";
  }
  if (cols % 8) {
    EXPECT_EQ(order.back(), full);
  }
  auto energy = [&](std::uint32_t b) {
    double e = 0;
    for (std::uint32_t i = b * 8; i < b * 8 + 8; ++i) e += h[std::size_t(i) * cols + i];
    return e;
  };
  for (std::uint32_t k = 0; k + 1 < full; ++k) {
    const double a = energy(order[k]), b = energy(order[k + 1]);
    EXPECT_TRUE(a > b || (a == b && order[k] < order[k + 1])) << "positions " << k << ", " << k + 1;
  }
}

TEST(Calibration, TheFactorEqualsThePlainRowByRowFormForAnyThreadCount) {
  // Odd sizes, a partial last block, dead columns; 1031 columns reach the threaded Cholesky columns (the rows below
  // times the column, up to (n / 2)^2, at least 2^18). The log-normal input scales reorder the blocks.
  for (std::uint32_t cols : {5u, 37u, 136u, 523u, 1031u}) {
    std::vector<float> h = anisotropic_h(cols, cols + 64, 40 + cols);
    for (std::uint32_t d : {1u, cols / 2, cols - 1}) {
      for (std::uint32_t j = 0; j < cols; ++j) h[std::size_t(d) * cols + j] = h[std::size_t(j) * cols + d] = 0.0f;
    }
    const HessianView hv{h, cols, double(cols + 64)};
    const std::vector<std::uint32_t> order = block_order(hv);
    expect_block_order(h, cols, order);
    if (cols >= 136) {
      bool moved = false;
      for (std::uint32_t k = 0; k < order.size(); ++k) moved = moved || order[k] != k;
      EXPECT_TRUE(moved) << cols << " columns: the blocks kept their stored order";
    }
    const std::vector<float> want = reference_factor(h, cols, order);
    for (int threads : {1, 3, 8}) {
      auto f = make_feedback_factor(hv, "w", threads);
      ASSERT_TRUE(f.has_value()) << f.error().to_string();
      ASSERT_EQ(f->f.size(), want.size());
      EXPECT_EQ(std::memcmp(f->f.data(), want.data(), want.size() * sizeof(float)), 0)
          << cols << " columns, " << threads << " threads";
      EXPECT_EQ(f->dead[cols / 2], 1u);
      EXPECT_EQ(f->order, order);
    }
  }
}

TEST(Calibration, EqualBlockEnergiesKeepTheStoredOrder) {
  const std::uint32_t cols = 203;
  std::vector<float> h(std::size_t(cols) * cols, 0.0f);
  for (std::uint32_t i = 0; i < cols; ++i) h[std::size_t(i) * cols + i] = 3.0f;
  const auto order = block_order({h, cols, 3.0});
  for (std::uint32_t k = 0; k < order.size(); ++k) EXPECT_EQ(order[k], k);
}

// Inputs whose 8-column blocks have log-normal scales (sigma 1.5 in log space, placed at random), mixed within and
// across blocks: block act-order against the same feedback in stored order (the reference factor with the identity
// order, i.e. the encoder without act-order), both at the same scale on the same normalised rows.
TEST(Calibration, BlockActOrderLowersTheWeightedErrorOnAnisotropicBlockEnergies) {
  const std::uint32_t rows = 256, cols = 256, tokens = 2048;
  const std::vector<float> h = anisotropic_h(cols, tokens, 21, 8, 6);
  const HessianView hv{h, cols, double(tokens)};
  auto act = make_feedback_factor(hv, "w", 2);
  ASSERT_TRUE(act.has_value()) << act.error().to_string();
  FeedbackFactor stored = *act;
  for (std::uint32_t b = 0; b < stored.order.size(); ++b) stored.order[b] = b;
  stored.f = reference_factor(h, cols, stored.order);
  std::mt19937 rng(22);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(std::size_t(rows) * cols);
  for (auto& v : x) v = n(rng);
  for (const float scale : {0.25f, 0.4f}) {  // about 4 and 3.3 bits per weight
    lattice::QuantizedFields qa, qs;
    quantize_feedback(x.data(), rows, cols, scale, *act, qa, 2);
    quantize_feedback(x.data(), rows, cols, scale, stored, qs, 2);
    auto dequantized = [&](const lattice::QuantizedFields& q) {
      std::vector<float> d(x.size());
      for (std::size_t v = 0; v < x.size() / 8; ++v) {
        const auto p = lattice::fields_to_point(q.coset[v], &q.fields[v * 8]);
        for (int i = 0; i < 8; ++i) d[v * 8 + i] = scale * lattice::coordinate(p.z[i], p.c);
      }
      return d;
    };
    const double err_act = h_weighted_relative_error(x, dequantized(qa), rows, hv, 2);
    const double err_stored = h_weighted_relative_error(x, dequantized(qs), rows, hv, 2);
    auto coded_bytes = [](const lattice::QuantizedFields& q) {
      return model::estimate_coded_bytes(model::count_fields(q.coset.data(), q.fields.data(), q.vectors()),
                                         model::initial_prob_bits(4.0), model::default_tile_symbols(4.0));
    };
    const double bytes_act = coded_bytes(qa), bytes_stored = coded_bytes(qs);
    std::printf("scale %.2f: H-weighted error %.5f act-order, %.5f stored order (ratio %.3f); %.3f / %.3f bpw coded\n",
                scale, err_act, err_stored, err_act / err_stored, 8 * bytes_act / x.size(),
                8 * bytes_stored / x.size());
    // At one scale the two orders spend slightly different rates: the comparison is near equal rate, and the error
    // is brought to the stored order's rate by the lattice's 2^-R per bit before it is compared.
    EXPECT_NEAR(bytes_act / bytes_stored, 1.0, 0.03) << "scale " << scale;
    const double at_equal_rate = err_act * std::exp2(8 * (bytes_act - bytes_stored) / x.size());
    EXPECT_LT(at_equal_rate, 0.9 * err_stored) << "scale " << scale;
  }
}

TEST(Calibration, AnisotropicHessianLowersTheWeightedErrorAtTheSameRate) {
  const std::uint32_t cols = 256;
  const auto h = anisotropic_h(cols, 1024, 7);
  const HessianView hv{h, cols, 1024.0};
  for (const double target : {3.0, 4.0}) {
    // The whole tensor as the sample (its rate measured), and a quarter of a larger one (the size model, corrected
    // on the whole tensor).
    for (const std::uint64_t max_vectors : {std::uint64_t(262144), std::uint64_t(8192)}) {
      const std::uint32_t rows = max_vectors == 8192 ? 1024 : 192;
      const auto w = layer(rows, cols, 11);
      const Outcome r = compare(w, rows, cols, hv, target, max_vectors);
      std::printf("target %.1f, sample %llu vectors: H-weighted error %.5f plain, %.5f calibrated (ratio %.3f); "
                  "stored %.4f / %.4f bpp\n",
                  target, static_cast<unsigned long long>(max_vectors), r.plain_err, r.calib_err,
                  r.calib_err / r.plain_err, r.plain_bpp, r.calib_bpp);
      EXPECT_LT(r.calib_err, 0.84 * r.plain_err) << "target " << target;  // 0.7 in squared error
      EXPECT_NEAR(r.calib_bpp / target, 1.0, 0.005) << "target " << target;
      EXPECT_NEAR(r.plain_bpp / target, 1.0, 0.005) << "target " << target;
    }
  }
}

TEST(Calibration, IdentityHessianGivesThePlainError) {
  const std::uint32_t rows = 160, cols = 200;  // cols not a multiple of 8: a partial last block
  std::vector<float> h(std::size_t(cols) * cols, 0.0f);
  for (std::uint32_t i = 0; i < cols; ++i) h[std::size_t(i) * cols + i] = 500.0f;
  const HessianView hv{h, cols, 500.0};
  const auto w = layer(rows, cols, 5);
  const Outcome r = compare(w, rows, cols, hv, 4.0);
  std::printf("identity H: error %.6f plain, %.6f calibrated; stored %.4f / %.4f bpp\n", r.plain_err, r.calib_err,
              r.plain_bpp, r.calib_bpp);
  EXPECT_NEAR(r.calib_err / r.plain_err, 1.0, 0.01);
  EXPECT_NEAR(r.calib_bpp / 4.0, 1.0, 0.005);
}

TEST(Calibration, DecodesToWhatTheEncoderWrote) {
  const std::uint32_t rows = 64, cols = 136;
  const auto h = anisotropic_h(cols, 512, 3);
  const HessianView hv{h, cols, 512.0};
  const auto w = layer(rows, cols, 9);
  EncodeOptions o;
  o.target_bpp = 3.5;
  o.calibration = &hv;
  EncodeReport report;
  auto e = encode(bytes_of(w), rows, cols, DType::kF32, o, "w", &report);
  ASSERT_TRUE(e.has_value()) << e.error().to_string();
  // The encoder's own arithmetic: normalised rows (the padded RMS), feedback rounding at the reported scale, the
  // stored row scales times the points' float32 coordinates.
  const std::uint32_t padded = 136;
  std::vector<float> norm(std::size_t(rows) * padded);
  for (std::uint32_t r = 0; r < rows; ++r) {
    double s2 = 0;
    for (std::uint32_t c = 0; c < cols; ++c) s2 += double(w[r * cols + c]) * w[r * cols + c];
    const float rms = std::max(float(std::sqrt(s2 / padded)), 1e-12f);
    for (std::uint32_t c = 0; c < cols; ++c) norm[r * padded + c] = w[r * cols + c] / rms;
  }
  auto f = make_feedback_factor(hv, "w");
  ASSERT_TRUE(f.has_value());
  lattice::QuantizedFields q;
  quantize_feedback(norm.data(), rows, padded, float(report.scale), *f, q, 1);
  const auto decoded = decode_f32(*e);
  std::size_t differ = 0;
  for (std::uint32_t r = 0; r < rows; ++r) {
    for (std::uint32_t v = 0; v < padded / 8; ++v) {
      const auto p = lattice::fields_to_point(q.coset[r * 17 + v], &q.fields[(r * 17 + v) * 8]);
      for (int i = 0; i < 8; ++i) {
        const float expect = lattice::coordinate(p.z[i], p.c) * e->scales[r];
        differ += std::memcmp(&expect, &decoded[r * cols + v * 8 + i], 4) != 0;
      }
    }
  }
  EXPECT_EQ(differ, 0u);
  // And the thread count does not change the stream.
  o.threads = 3;
  auto e3 = encode(bytes_of(w), rows, cols, DType::kF32, o, "w");
  ASSERT_TRUE(e3.has_value());
  EXPECT_EQ(e->payload, e3->payload);
  EXPECT_EQ(e->scales, e3->scales);
}

TEST(Calibration, TheStreamDoesNotDependOnTheKernelBuild) {
  // The AVX2 and baseline builds of the calibrated kernels (codec/rate/simd.h) give the same stream.
  const std::uint32_t rows = 48, cols = 203;
  const auto h = anisotropic_h(cols, 512, 8);
  const HessianView hv{h, cols, 512.0};
  const auto w = layer(rows, cols, 12);
  EncodeOptions o;
  o.target_bpp = 3.0;
  o.threads = 2;
  o.calibration = &hv;
  auto a = encode(bytes_of(w), rows, cols, DType::kF32, o, "w");
  simd::allow_avx2(false);
  auto b = encode(bytes_of(w), rows, cols, DType::kF32, o, "w");
  simd::allow_avx2(true);
  ASSERT_TRUE(a.has_value() && b.has_value());
  EXPECT_EQ(a->payload, b->payload);
  EXPECT_EQ(a->scales, b->scales);
}

TEST(Calibration, WithoutStatisticsTheStreamIsUnchanged) {
  const auto w = layer(96, 128, 2);
  const std::string path = write_stats("empty_stats.safetensors", {});
  auto set = CalibrationSet::open(path);
  ASSERT_TRUE(set.has_value()) << set.error().to_string();
  EncodeOptions o;
  o.target_bpp = 3.0;
  auto a = encode(bytes_of(w), 96, 128, DType::kF32, o, "w");
  o.calibration = set->find("w");
  EXPECT_EQ(o.calibration, nullptr);
  auto b = encode(bytes_of(w), 96, 128, DType::kF32, o, "w");
  ASSERT_TRUE(a.has_value() && b.has_value());
  EXPECT_EQ(a->payload, b->payload);
  EXPECT_EQ(a->scales, b->scales);
  EXPECT_EQ(a->states, b->states);
  EXPECT_EQ(a->freq_tables, b->freq_tables);
}

TEST(Calibration, RefusesMalformedStatisticsNamingTheTensor) {
  const std::uint32_t cols = 16;
  std::vector<float> good(cols * cols, 0.0f);
  for (std::uint32_t i = 0; i < cols; ++i) good[i * cols + i] = 2.0f;
  good[1] = good[cols] = 0.5f;
  const std::vector<std::int64_t> tokens{100};
  auto expect_refused = [&](const char* file, std::vector<Stat> stats, const std::string& tensor,
                            const std::string& what) {
    auto set = CalibrationSet::open(write_stats(file, stats));
    ASSERT_FALSE(set.has_value()) << file;
    EXPECT_NE(set.error().message.find("'" + tensor + "'"), std::string::npos) << set.error().message;
    EXPECT_NE(set.error().message.find(what), std::string::npos) << set.error().message;
  };
  {
    auto ok = CalibrationSet::open(write_stats(
        "ok.safetensors", {stat("l.weight.hessian", {cols, cols}, good, DType::kF32),
                           stat("l.weight.tokens", {}, tokens, DType::kI64)}));
    ASSERT_TRUE(ok.has_value()) << ok.error().to_string();
    ASSERT_NE(ok->find("l.weight"), nullptr);
    EXPECT_EQ(ok->find("l.weight")->tokens, 100.0);
  }
  std::vector<float> wide(cols * (cols + 1), 1.0f);
  expect_refused("shape.safetensors",
                 {stat("a.hessian", {cols, cols + 1}, wide, DType::kF32), stat("a.tokens", {1}, tokens, DType::kI64)},
                 "a.hessian", "shape");
  auto nan = good;
  nan[3 * cols + 5] = std::numeric_limits<float>::quiet_NaN();
  expect_refused("nan.safetensors",
                 {stat("b.hessian", {cols, cols}, nan, DType::kF32), stat("b.tokens", {}, tokens, DType::kI64)},
                 "b.hessian", "non-finite entry at row 3, column 5");
  auto asym = good;
  asym[2 * cols + 7] = 0.3f;
  expect_refused("asym.safetensors",
                 {stat("c.hessian", {cols, cols}, asym, DType::kF32), stat("c.tokens", {}, tokens, DType::kI64)},
                 "c.hessian", "not symmetric at row 2, column 7");
  expect_refused("notokens.safetensors", {stat("d.hessian", {cols, cols}, good, DType::kF32)}, "d.hessian",
                 "missing token count");
  // A hessian whose weight the checkpoint lacks, or whose size is not the weight's input dimension.
  auto set = CalibrationSet::open(write_stats(
      "orphan.safetensors", {stat("e.hessian", {cols, cols}, good, DType::kF32),
                             stat("e.tokens", {}, std::vector<float>{64.0f}, DType::kF32)}));
  ASSERT_TRUE(set.has_value()) << set.error().to_string();
  std::vector<safetensors::TensorView> weights(1);
  weights[0].name = "f";
  weights[0].shape = {4, cols};
  auto st = set->check_against(weights);
  ASSERT_FALSE(st.has_value());
  EXPECT_NE(st.error().message.find("'e.hessian'"), std::string::npos) << st.error().message;
  weights[0].name = "e";
  weights[0].shape = {4, cols * 2};
  st = set->check_against(weights);
  ASSERT_FALSE(st.has_value());
  EXPECT_NE(st.error().message.find("input dimension"), std::string::npos) << st.error().message;
  weights[0].shape = {4, cols};
  EXPECT_TRUE(set->check_against(weights).has_value());
}

// The budget's output-error model (codec/rate/output_error.h) against the calibrated encoder: predicted output error
// per token, gain * the plain encoder's squared weight error at the same rate, over the measured one. The allocation
// needs the ratio to be about the same across layers (a common factor cancels). On inputs of equal scale correlated
// across blocks the model is the measured error; on log-normal input scales the encoder does better than it (with
// or without correlation). Plain rounding's tr(H) is never closer, and overprices correlated layers by what the
// feedback saves.
TEST(Calibration, TheBudgetsOutputErrorModelTracksTheCalibratedError) {
  const std::uint32_t rows = 192, cols = 256, tokens = 1024;
  std::vector<std::pair<std::string, std::vector<float>>> hs;
  hs.emplace_back("anisotropic", anisotropic_h(cols, tokens, 7));
  std::vector<float> diagonal(hs[0].second.size(), 0.0f);  // the same input scales, no correlation
  for (std::size_t i = 0; i < cols; ++i) diagonal[i * cols + i] = hs[0].second[i * cols + i];
  hs.emplace_back("its diagonal", diagonal);
  // Unit scales, each input shared with the columns 8 and 16 further on (across blocks), and an AR(1) chain.
  for (const int kind : {0, 1}) {
    std::mt19937 rng(3 + kind);
    std::normal_distribution<float> n(0.0f, 1.0f);
    std::vector<double> h(std::size_t(cols) * cols, 0.0);
    std::vector<float> z(cols), x(cols);
    for (std::uint32_t t = 0; t < tokens; ++t) {
      for (auto& v : z) v = n(rng);
      for (std::uint32_t j = 0; j < cols; ++j)
        x[j] = kind == 0 ? z[j] + 0.9f * z[(j + 8) % cols] + 0.7f * z[(j + 16) % cols]
                         : (j ? 0.95f * x[j - 1] : 0.0f) + 0.3f * z[j];
      for (std::uint32_t i = 0; i < cols; ++i)
        for (std::uint32_t j = 0; j < cols; ++j) h[std::size_t(i) * cols + j] += double(x[i]) * x[j];
    }
    hs.emplace_back(kind == 0 ? "shared across blocks" : "AR(1) 0.95", std::vector<float>(h.begin(), h.end()));
  }
  const auto w = layer(rows, cols, 11);
  for (const auto& [label, h] : hs) {
    const HessianView hv{h, cols, double(tokens)};
    EncodeOptions o;
    o.target_bpp = 4.0;
    o.threads = 2;
    auto plain = encode(bytes_of(w), rows, cols, DType::kF32, o, "w");
    o.calibration = &hv;
    auto calib = encode(bytes_of(w), rows, cols, DType::kF32, o, "w");
    ASSERT_TRUE(plain && calib);
    const auto qp = decode_f32(*plain), qc = decode_f32(*calib);
    std::vector<float> ec(w.size()), ep(w.size());
    double weight_err = 0.0, cal_weight_err = 0.0;
    for (std::size_t k = 0; k < w.size(); ++k) {
      ep[k] = w[k] - qp[k];
      ec[k] = w[k] - qc[k];
      weight_err += double(ep[k]) * ep[k];
      cal_weight_err += double(ec[k]) * ec[k];
    }
    const double measured = h_weighted_energy(ec.data(), rows, cols, hv, 2) / tokens;
    const double plain_out = h_weighted_energy(ep.data(), rows, cols, hv, 2) / tokens;
    auto gain = calibrated_output_gain(hv, "w", 2);
    ASSERT_TRUE(gain.has_value());
    double trace = 0.0;
    for (std::uint32_t i = 0; i < cols; ++i) trace += h[std::size_t(i) * cols + i];
    std::printf("%-22s out/token: calibrated %.4g (plain %.4g); weight err cal/plain %.3f; model S_b %.4g (%.3f), "
                "model tr(H) %.4g (%.3f)\n",
                label.c_str(), measured, plain_out, cal_weight_err / weight_err, *gain * weight_err,
                *gain * weight_err / measured, trace / (cols * tokens) * weight_err,
                trace / (cols * tokens) * weight_err / measured);
    const double model = *gain * weight_err / measured, plain_model = trace / (cols * tokens) * weight_err / measured;
    // The damping (1% of the mean diagonal) is in the model and not in tr(H): the slack.
    EXPECT_LE(std::abs(std::log(model)), std::abs(std::log(plain_model)) + 0.02) << label;
    EXPECT_GT(model, 0.9) << label;
    EXPECT_LT(model, 2.2) << label;
    if (label == "shared across blocks" || label == "AR(1) 0.95") {
      EXPECT_NEAR(model, 1.0, 0.15) << label;
    }
  }
}
}  // namespace
}  // namespace epk::rate
