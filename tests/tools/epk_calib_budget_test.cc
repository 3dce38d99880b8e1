// epk compress --budget-bpp with --calibration, end to end: tensors with statistics are priced by their estimated
// output error (codec/rate/output_error.h), the others by their weight error; the budget and each tensor's rate are
// still met, and malformed statistics are still refused naming the tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "codec/common/half.h"
#include "codec/safetensors/checkpoint.h"
#include "codec/safetensors/writer.h"
#include "tests/tools/epk_cli_fixture.h"

namespace {

using namespace epk_cli_test;  // NOLINT

constexpr std::uint64_t kRows = 384, kCols = 256;

// BF16 weights, every tensor the same values (one seed), so that only their statistics tell them apart.
void write_identical(const std::string& file, const std::vector<std::string>& names) {
  std::vector<epk::safetensors::TensorSpec> decl;
  for (const auto& n : names) decl.push_back({n, epk::DType::kBF16, {kRows, kCols}});
  auto wr = epk::safetensors::Writer::create(file, decl, {{"format", "pt"}});
  ASSERT_TRUE(wr) << wr.error().message;
  std::mt19937 rng(17);
  std::normal_distribution<float> g(0.0f, 0.02f);
  std::vector<std::uint8_t> bytes(2 * kRows * kCols);
  for (std::size_t i = 0; i < bytes.size() / 2; ++i) {
    const std::uint16_t b = epk::f32_to_bf16(g(rng));
    bytes[2 * i] = std::uint8_t(b & 0xFF);
    bytes[2 * i + 1] = std::uint8_t(b >> 8);
  }
  for (const auto& n : names) ASSERT_TRUE(wr->write(n, bytes));
  ASSERT_TRUE(wr->finish());
}

struct Stats {
  std::vector<float> h;  // kCols x kCols, unless a test breaks it
  std::vector<std::uint64_t> shape = {kCols, kCols};
  std::int64_t tokens = 512;
};

Stats scaled_identity(float per_token) {
  Stats s;
  s.h.assign(kCols * kCols, 0.0f);
  for (std::uint64_t i = 0; i < kCols; ++i) s.h[i * kCols + i] = per_token * float(s.tokens);
  return s;
}

void write_stats(const std::string& file, const std::map<std::string, Stats>& stats) {
  std::vector<epk::safetensors::TensorSpec> decl;
  for (const auto& [name, s] : stats) {
    decl.push_back({name + ".hessian", epk::DType::kF32, s.shape});
    decl.push_back({name + ".tokens", epk::DType::kI64, {}});
  }
  auto wr = epk::safetensors::Writer::create(file, decl);
  ASSERT_TRUE(wr) << wr.error().message;
  // The writer chooses the file order: supply each tensor's bytes when it asks for them.
  while (!wr->next_tensor().empty()) {
    const std::string next(wr->next_tensor());
    const bool is_h = next.size() > 8 && next.compare(next.size() - 8, 8, ".hessian") == 0;
    const Stats& s = stats.at(next.substr(0, next.rfind('.')));
    if (is_h)
      ASSERT_TRUE(wr->write(next, {reinterpret_cast<const std::uint8_t*>(s.h.data()), s.h.size() * 4}));
    else
      ASSERT_TRUE(wr->write(next, {reinterpret_cast<const std::uint8_t*>(&s.tokens), 8}));
  }
  ASSERT_TRUE(wr->finish());
}

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

class EpkCalibBudget : public EpkCompress {
 protected:
  // compress at --budget-bpp 4, then verify --json: the tensors' target and stored rates by name, and the average
  // stored rate over them.
  struct Rates {
    std::vector<std::string> order;  // the lattice-rans tensors, in file order
    std::map<std::string, double> target, stored;
    double average = 0.0;  // over the lattice-rans tensors
  };
  Rates compress(const std::string& src, const std::string& out, const std::string& extra) {
    auto r = epk("compress " + src + " -o " + out + " --budget-bpp 4 --device cpu --threads 2 " + extra);
    EXPECT_EQ(r.status, 0) << r.out;
    auto j = parse(epk("verify --json " + out, false).out);
    EXPECT_FALSE(j.is_discarded());
    Rates rates;
    double weights = 0, bits = 0;
    for (const auto& t : j["tensors"]) {
      if (t["encoding"] != "lattice-rans") continue;
      rates.order.push_back(t["name"]);
      rates.target[t["name"]] = t["target_bpp"].get<double>();
      rates.stored[t["name"]] = t["stored_bpp"].get<double>();
      weights += t["weights"].get<double>();
      bits += 8.0 * t["stored_bytes"].get<double>();
    }
    rates.average = bits / weights;
    return rates;
  }
};

TEST_F(EpkCalibBudget, ATensorWhoseOutputErrorCostsMoreGetsMoreBits) {
  const std::string src = path("w.safetensors"), stats = path("stats.safetensors");
  write_identical(src, {"big.weight", "plain.weight", "tiny.weight"});
  // big's inputs have 16x the second moment of plain's (which is priced by its weight error, as if they were 1),
  // tiny's 1/16: gains 16 (1 + damping) and 1/16 (1 + damping), about two bits either side.
  write_stats(stats, {{"big.weight", scaled_identity(16.0f)}, {"tiny.weight", scaled_identity(1.0f / 16)}});
  const Rates r = compress(src, path("cal.epk"), "--calibration " + stats);
  std::printf("targets: big %.4f, plain %.4f, tiny %.4f; average stored %.4f bpp\n", r.target.at("big.weight"),
              r.target.at("plain.weight"), r.target.at("tiny.weight"), r.average);
  EXPECT_GT(r.target.at("big.weight"), r.target.at("plain.weight") + 1.5);
  EXPECT_GT(r.target.at("plain.weight"), r.target.at("tiny.weight") + 1.5);
  for (const auto& [name, target] : r.target) EXPECT_NEAR(r.stored.at(name) / target, 1.0, 0.005) << name;
  EXPECT_NEAR(r.average / 4.0, 1.0, 0.01);
  EXPECT_LE(r.average, 4.0 * 1.005);
}

TEST_F(EpkCalibBudget, IdentityStatisticsEverywhereGiveTheWeightErrorAllocation) {
  // Same-sized tensors with different weights, so the weight-error allocation is not uniform.
  const std::string src = model();
  const Rates plain = compress(src, path("plain.epk"), "");
  // H = tokens * I for each weight the plain file encoded, its input columns from the checkpoint.
  auto checkpoint = epk::safetensors::Checkpoint::open(src);
  ASSERT_TRUE(checkpoint) << checkpoint.error().message;
  std::map<std::string, Stats> stats;
  for (const auto& t : checkpoint->tensors()) {
    if (!plain.target.count(t.name)) continue;
    const std::uint64_t cols = t.shape[1];
    Stats s;
    s.shape = {cols, cols};
    s.h.assign(cols * cols, 0.0f);
    for (std::uint64_t i = 0; i < cols; ++i) s.h[i * cols + i] = float(s.tokens);
    stats[t.name] = std::move(s);
  }
  ASSERT_FALSE(stats.empty());
  write_stats(path("identity.safetensors"), stats);
  const Rates cal = compress(src, path("cal.epk"), "--calibration " + path("identity.safetensors"));
  // Every gain is 1 + damping: a common factor, which moves the allocation by the bisection's rounding only. That
  // is the whole story for the first tensor; each later one is allocated the bits the tensors before it left, and
  // the calibrated streams are not the plain ones, so those move by what the earlier ones missed their rate by.
  ASSERT_EQ(cal.order, plain.order);
  ASSERT_GT(plain.order.size(), 1u);
  EXPECT_NEAR(cal.target.at(plain.order[0]), plain.target.at(plain.order[0]), 1e-9);
  for (const auto& [name, target] : plain.target) EXPECT_NEAR(cal.target.at(name), target, 0.02) << name;
  EXPECT_NEAR(cal.average / plain.average, 1.0, 0.005);
}

TEST_F(EpkCalibBudget, WithoutStatisticsTheFileIsTheUncalibratedOne) {
  const std::string src = path("w.safetensors"), empty = path("empty.safetensors");
  write_identical(src, {"a.weight", "b.weight"});
  write_stats(empty, {});
  compress(src, path("plain.epk"), "");
  compress(src, path("none.epk"), "--calibration " + empty);
  EXPECT_EQ(file_bytes(path("plain.epk")), file_bytes(path("none.epk")));
}

TEST_F(EpkCalibBudget, MalformedStatisticsAreRefusedNamingTheTensor) {
  const std::string src = path("w.safetensors");
  write_identical(src, {"a.weight", "b.weight"});
  Stats nan = scaled_identity(1.0f);
  nan.h[3 * kCols + 5] = std::numeric_limits<float>::quiet_NaN();
  Stats wrong_shape = scaled_identity(1.0f);
  wrong_shape.shape = {kCols / 2, kCols * 2};
  // Symmetric and finite, but columns 0 and 1 correlated past Cauchy-Schwarz: not positive definite after damping
  // (refused by the output-error model, before any tensor is encoded).
  Stats not_positive = scaled_identity(1.0f);
  not_positive.h[1] = not_positive.h[kCols] = 2.0f * float(not_positive.tokens);
  for (const auto* s : {&nan, &wrong_shape, &not_positive}) {
    const std::string file = path("bad.safetensors");
    write_stats(file, {{"a.weight", scaled_identity(1.0f)}, {"b.weight", *s}});
    auto r = epk("compress " + src + " -o " + path("x.epk") + " --budget-bpp 4 --device cpu --calibration " + file);
    EXPECT_NE(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("b.weight"), std::string::npos) << r.out;
  }
}

}  // namespace
