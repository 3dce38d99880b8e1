// The budget's output-error model under calibration (codec/rate/output_error.h) on matrices whose Schur complements
// are known in closed form.
#include "codec/rate/output_error.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "codec/rate/feedback.h"

namespace epk::rate {
namespace {

std::vector<float> scaled_identity(std::uint32_t cols, float v) {
  std::vector<float> h(std::size_t(cols) * cols, 0.0f);
  for (std::uint32_t i = 0; i < cols; ++i) h[std::size_t(i) * cols + i] = v;
  return h;
}

// 8x8 blocks on the diagonal, each a random positive definite matrix, nothing across blocks.
std::vector<float> block_diagonal(std::uint32_t cols, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> h(std::size_t(cols) * cols, 0.0f);
  for (std::uint32_t b0 = 0; b0 < cols; b0 += 8) {
    const std::uint32_t e = std::min(b0 + 8, cols);
    for (int t = 0; t < 16; ++t) {
      std::vector<float> x(e - b0);
      for (auto& v : x) v = n(rng);
      for (std::uint32_t i = b0; i < e; ++i)
        for (std::uint32_t j = b0; j < e; ++j) h[std::size_t(i) * cols + j] += x[i - b0] * x[j - b0];
    }
  }
  return h;
}

TEST(OutputError, ScaledIdentityGivesOnePlusTheDampingForAnyTokenCount) {
  for (const double tokens : {1.0, 500.0}) {
    const auto h = scaled_identity(200, float(tokens));  // cols not a multiple of 8: a partial last block
    auto g = calibrated_output_gain({h, 200, tokens}, "w");
    ASSERT_TRUE(g.has_value()) << g.error().message;
    EXPECT_NEAR(*g, 1.0 + kFeedbackDamping, 1e-12);
  }
}

TEST(OutputError, WithoutCrossBlockCorrelationFeedbackSavesNothing) {
  // The later blocks carry nothing about block b, so S_b = H_bb and the gain is tr(H + damp I) / (cols * tokens).
  const std::uint32_t cols = 100;
  const auto h = block_diagonal(cols, 3);
  double trace = 0;
  for (std::uint32_t i = 0; i < cols; ++i) trace += h[std::size_t(i) * cols + i];
  const double damp = kFeedbackDamping * trace / cols;
  auto g = calibrated_output_gain({h, cols, 16.0}, "w");
  ASSERT_TRUE(g.has_value());
  EXPECT_NEAR(*g / ((trace + cols * damp) / (cols * 16.0)), 1.0, 1e-9);
}

TEST(OutputError, CorrelationAcrossBlocksLowersTheGainBelowThePlainTrace) {
  // Two columns in different blocks carrying the same input: feedback moves one's error onto the other.
  const std::uint32_t cols = 16;
  auto h = scaled_identity(cols, 1.0f);
  h[0 * cols + 8] = h[8 * cols + 0] = 0.9f;
  auto g = calibrated_output_gain({h, cols, 1.0}, "w");
  ASSERT_TRUE(g.has_value());
  // Column 0's Schur complement given column 8 (and the rest): 1 + d - c^2 / (1 + d), every other column 1 + d.
  const double d = kFeedbackDamping, c = double(0.9f);
  EXPECT_NEAR(*g, (15 * (1 + d) + (1 + d - c * c / (1 + d))) / 16.0, 1e-12);
  EXPECT_LT(*g, 1 + d);
}

TEST(OutputError, LinearInHAndDeadColumnsAddNothing) {
  const std::uint32_t cols = 64;
  const auto h = block_diagonal(cols, 9);
  std::vector<float> h4(h);
  for (auto& v : h4) v *= 4.0f;
  auto g = calibrated_output_gain({h, cols, 16.0}, "w");
  auto g4 = calibrated_output_gain({h4, cols, 16.0}, "w");
  ASSERT_TRUE(g && g4);
  EXPECT_NEAR(*g4 / *g, 4.0, 1e-9);
  // Identity with one input never seen: damp = 0.01 (the dead diagonal counts as 1), and the dead column is out.
  auto dead = scaled_identity(cols, 1.0f);
  dead[5 * cols + 5] = 0.0f;
  auto gd = calibrated_output_gain({dead, cols, 1.0}, "w");
  ASSERT_TRUE(gd.has_value());
  EXPECT_NEAR(*gd, (cols - 1) * (1.0 + kFeedbackDamping) / cols, 1e-12);
}

TEST(OutputError, TheSameForAnyThreadCount) {
  const std::uint32_t cols = 300;
  std::mt19937 rng(1);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> h(std::size_t(cols) * cols, 0.0f);
  for (int t = 0; t < 400; ++t) {
    std::vector<float> x(cols);
    for (std::uint32_t j = 0; j < cols; ++j) x[j] = n(rng) + (j ? 0.8f * x[j - 1] : 0.0f);
    for (std::uint32_t i = 0; i < cols; ++i)
      for (std::uint32_t j = 0; j < cols; ++j) h[std::size_t(i) * cols + j] += x[i] * x[j];
  }
  auto g1 = calibrated_output_gain({h, cols, 400.0}, "w", 1);
  auto g3 = calibrated_output_gain({h, cols, 400.0}, "w", 3);
  ASSERT_TRUE(g1 && g3);
  EXPECT_EQ(*g1, *g3);
}

TEST(OutputError, RefusesWhatTheEncoderRefusesNamingTheTensor) {
  // Not positive definite after damping.
  const std::vector<float> h = {1.0f, 2.0f, 2.0f, 1.0f};
  auto g = calibrated_output_gain({h, 2, 1.0}, "model.layers.0.mlp.up_proj.weight");
  ASSERT_FALSE(g.has_value());
  EXPECT_EQ(g.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(g.error().message.find("model.layers.0.mlp.up_proj.weight"), std::string::npos) << g.error().message;
  EXPECT_FALSE(make_feedback_factor({h, 2, 1.0}, "w").has_value());
}

}  // namespace
}  // namespace epk::rate
