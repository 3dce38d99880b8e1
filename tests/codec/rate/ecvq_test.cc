#include "codec/rate/ecvq.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "codec/model/tables.h"
#include "codec/rans/decoder.h"
#include "codec/rans/encoder.h"
#include "codec/rans/reference_format.h"
#include "codec/rate/encode.h"
#include "codec/rate/search.h"

namespace epk::rate {
namespace {

// Gaussian rows with log-normal row scales; row 0 all zero, row 1 huge, row 2 tiny (edge rows).
std::vector<float> layer(std::uint32_t rows, std::uint32_t cols, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> w(std::size_t(rows) * cols);
  for (std::uint32_t r = 0; r < rows; ++r) {
    float s = 0.02f * std::exp(n(rng));
    if (r == 0) s = 0.0f;
    if (r == 1) s = 3.0e4f;
    if (r == 2) s = 1.0e-6f;
    for (std::uint32_t c = 0; c < cols; ++c) w[std::size_t(r) * cols + c] = n(rng) * s;
  }
  return w;
}

std::span<const std::byte> bytes_of(const std::vector<float>& w) {
  return {reinterpret_cast<const std::byte*>(w.data()), w.size() * 4};
}

double rel_error(const std::vector<float>& w, const rans::EncodedTensor& enc) {
  std::vector<float> out(w.size());
  auto st = rans::decode(enc.view(), "t", DType::kF32, {reinterpret_cast<std::byte*>(out.data()), out.size() * 4});
  EXPECT_TRUE(st.has_value()) << st.error().to_string();
  double err = 0, energy = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    err += double(w[i] - out[i]) * double(w[i] - out[i]);
    energy += double(w[i]) * w[i];
  }
  return energy > 0 ? std::sqrt(err / energy) : (err == 0 ? 0.0 : 1.0);
}

struct Rows {
  std::vector<float> normalized;
  std::vector<float> rms;
};

Rows normalise(const std::vector<float>& w, std::uint32_t rows, std::uint32_t cols) {
  Rows r;
  r.normalized.resize(w.size());
  r.rms.resize(rows);
  for (std::uint32_t i = 0; i < rows; ++i) {
    double s = 0;
    for (std::uint32_t c = 0; c < cols; ++c) s += double(w[std::size_t(i) * cols + c]) * w[std::size_t(i) * cols + c];
    r.rms[i] = std::max(float(std::sqrt(s / cols)), 1e-12f);
    for (std::uint32_t c = 0; c < cols; ++c) {
      r.normalized[std::size_t(i) * cols + c] = w[std::size_t(i) * cols + c] / r.rms[i];
    }
  }
  return r;
}

// Streams of every new encoder path decode without a faulty tile, and their fields, coded again with the stream's
// own geometry and scales, give the same payload, states and tables word for word.
TEST(Ecvq, StreamsDecodeBitExactly) {
  const struct {
    std::uint32_t rows, cols;
    double bpp;
    bool ecvq, prune, fine;
    int rdo;
  } cases[] = {{37, 203, 4.0, true, false, false, 0}, {41, 96, 3.0, true, true, false, 0},
               {1, 13, 5.0, true, true, true, 0},     {64, 64, 4.0, true, true, false, 2},
               {9, 1001, 2.0, true, true, true, 1},   {120, 40, 8.0, false, false, true, 0}};
  std::uint32_t seed = 5;
  for (const auto& c : cases) {
    const auto w = layer(c.rows, c.cols, seed++);
    EncodeOptions o;
    o.target_bpp = c.bpp;
    o.ecvq = c.ecvq;
    o.prune_tables = c.prune;
    o.fine_rate = c.fine;
    o.rdo_sweeps = c.rdo;
    auto enc = encode(bytes_of(w), c.rows, c.cols, DType::kF32, o, "t");
    ASSERT_TRUE(enc.has_value()) << enc.error().to_string();
    auto faults = rans::check_tiles(enc->view(), "t");
    ASSERT_TRUE(faults.has_value()) << faults.error().to_string();
    EXPECT_TRUE(faults->empty()) << c.rows << "x" << c.cols;
    auto fields = rans::decode_fields(enc->view(), "t");
    ASSERT_TRUE(fields.has_value());
    rans::EncodeGeometry g{enc->rows, enc->cols, enc->prob_bits, enc->tile_symbols, enc->dtype};
    auto again = rans::encode_fields(*fields, enc->scales, g);
    ASSERT_TRUE(again.has_value());
    EXPECT_EQ(again->payload, enc->payload) << c.rows << "x" << c.cols;
    EXPECT_EQ(again->states, enc->states);
    EXPECT_EQ(again->freq_tables, enc->freq_tables);
    EXPECT_LT(rel_error(w, *enc), 0.5);
  }
}

// With lambda 0 the cost is the distance alone: every vector keeps its nearest point.
TEST(Ecvq, LambdaZeroKeepsTheNearestPoints) {
  const std::uint32_t rows = 23, cols = 48;
  auto w = layer(rows, cols, 11);
  w[0] = 0.01f;  // row 0 not all zero, so every row has a scale
  const Rows r = normalise(w, rows, cols);
  const std::size_t n = std::size_t(rows) * cols / 8;
  lattice::QuantizedFields nearest;
  quantize_all(r.normalized.data(), n, 0.3f, nearest, 1);
  lattice::QuantizedFields q = nearest;
  EcvqOptions o;
  o.lambda_factor = 0.0;
  EcvqReport rep;
  choose_points(r.normalized.data(), r.rms.data(), rows, cols, 0.3f, q, o, &rep);
  EXPECT_EQ(rep.changed, 0u);
  EXPECT_EQ(q.coset, nearest.coset);
  EXPECT_EQ(q.fields, nearest.fields);
}

// At a fixed scale the chosen points cost fewer modelled bytes than the nearest ones, and no table grows.
TEST(Ecvq, LowersTheCodedSizeAtAFixedScale) {
  const std::uint32_t rows = 257, cols = 136;
  const auto w = layer(rows, cols, 3);
  const Rows r = normalise(w, rows, cols);
  const std::size_t n = std::size_t(rows) * cols / 8;
  lattice::QuantizedFields q;
  quantize_all(r.normalized.data(), n, 0.27f, q, 1);
  const model::FieldCounts before = model::count_fields(q.coset.data(), q.fields.data(), n);
  EcvqOptions o;
  EcvqReport rep;
  choose_points(r.normalized.data(), r.rms.data(), rows, cols, 0.27f, q, o, &rep);
  const model::FieldCounts after = model::count_fields(q.coset.data(), q.fields.data(), n);
  EXPECT_GT(rep.changed, 0u);
  EXPECT_LT(model::estimate_coded_bytes(after, 11, 16384), model::estimate_coded_bytes(before, 11, 16384));
  for (int t = 1; t < model::kTables; ++t) {
    if (after[std::size_t(t)].total == 0) continue;
    EXPECT_GE(after[std::size_t(t)].sym_min, before[std::size_t(t)].sym_min) << t;
    EXPECT_LE(after[std::size_t(t)].sym_min + std::int64_t(after[std::size_t(t)].alphabet()),
              before[std::size_t(t)].sym_min + std::int64_t(before[std::size_t(t)].alphabet()))
        << t;
  }
}

// Pruning on a small heavy-tailed layer stores fewer table entries than ECVQ alone, at the same target.
TEST(Ecvq, PruningStoresFewerTableEntries) {
  const std::uint32_t rows = 48, cols = 136;
  std::mt19937 rng(21);
  std::student_t_distribution<float> t(3.0f);
  std::vector<float> w(std::size_t(rows) * cols);
  for (float& v : w) v = t(rng);
  EncodeOptions o;
  o.ecvq = true;
  auto plain = encode(bytes_of(w), rows, cols, DType::kF32, o, "t");
  o.prune_tables = true;
  EncodeReport rep;
  auto pruned = encode(bytes_of(w), rows, cols, DType::kF32, o, "t", &rep);
  ASSERT_TRUE(plain.has_value() && pruned.has_value());
  EXPECT_GT(rep.pruned_entries, 0u);
  EXPECT_LT(pruned->freq_tables.size(), plain->freq_tables.size());
}

// The error falls as the target rises, and the stored rate stays within 1% of it, on every new path.
TEST(Ecvq, ErrorMonotonicInTheTarget) {
  const std::uint32_t rows = 200, cols = 264;
  const auto w = layer(rows, cols, 8);
  for (int mode = 0; mode < 3; ++mode) {
    double last = 1e9;
    for (double target : {2.0, 3.0, 4.0, 5.0, 6.0, 8.0}) {
      EncodeOptions o;
      o.target_bpp = target;
      o.ecvq = true;
      o.prune_tables = mode >= 1;
      o.fine_rate = mode >= 1;
      o.rdo_sweeps = mode == 2 ? 1 : 0;
      auto enc = encode(bytes_of(w), rows, cols, DType::kF32, o, "t");
      ASSERT_TRUE(enc.has_value()) << enc.error().to_string();
      const double stored = 8.0 * double(rans::reference_quant_state_bytes(*enc)) / (double(rows) * cols);
      EXPECT_NEAR(stored / target, 1.0, 0.01) << "mode " << mode << " target " << target;
      const double err = rel_error(w, *enc);
      EXPECT_LT(err, last) << "mode " << mode << " target " << target;
      last = err;
    }
  }
}

// Out-of-range lever settings are errors that name the tensor and the setting, never a crash.
TEST(Ecvq, BadSettingsAreClearErrors) {
  const auto w = layer(4, 16, 1);
  const auto try_options = [&](EncodeOptions o) { return encode(bytes_of(w), 4, 16, DType::kF32, o, "w.q"); };
  EncodeOptions o;
  o.ecvq = true;
  o.ecvq_iterations = 0;
  auto r = try_options(o);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("w.q"), std::string::npos);
  EXPECT_NE(r.error().message.find("ecvq_iterations"), std::string::npos);
  o.ecvq_iterations = 2;
  o.ecvq_lambda = std::nan("");
  r = try_options(o);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("ecvq_lambda"), std::string::npos);
  o.ecvq_lambda = 1.0;
  o.rdo_ratio_low = 1.2;
  r = try_options(o);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("ratio"), std::string::npos);
}

}  // namespace
}  // namespace epk::rate
