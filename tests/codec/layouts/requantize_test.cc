#include "codec/layouts/requantize.h"

#include <gtest/gtest.h>

#include <random>

#include "codec/layouts/bnb.h"
#include "codec/layouts/convert.h"
#include "codec/layouts/gptq.h"
#include "tests/codec/layouts/quant_fixtures.h"
#include "tests/codec/layouts/vectors.h"

namespace epk::layouts {
namespace {

TEST(Requantize, Nf4IntoGptqReportsTheAddedError) {
  // NF4 levels times an absmax: not on any uniform grid, so 4-bit RTN cannot be exact.
  const std::int64_t k = 128, n = 16;
  std::mt19937 rng(5);
  std::vector<float> w(k * n);
  for (auto& v : w) v = bnb::kNf4Levels[rng() % 16] * 0.037f;
  auto r = requantize_rtn(w, k, n, 4, 64, /*symmetric=*/false);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_FALSE(r->error.exact());
  EXPECT_GT(r->error.rms, 0.0);
  EXPECT_LT(r->error.rel_rms, 0.2);
  // Half a step from rounding, plus up to half a step at the range ends where the rounded zero point clips.
  float max_scale = 0;
  for (float s : r->tensor.scales) max_scale = std::max(max_scale, s);
  EXPECT_LE(r->error.max_abs, max_scale * 1.0001);
  EXPECT_TRUE(write_layout(r->tensor, Layout::kGptqV2));
}

TEST(Requantize, ValuesAlreadyOnTheGridComeBackExactly) {
  auto t = testing::random_quant_tensor(4, 64, 8, 32, 3, false, /*symmetric=*/true);
  // Make each group span the full symmetric range so RTN recovers the same scale.
  for (std::int64_t g = 0; g < t.num_groups; ++g) {
    for (std::int64_t c = 0; c < 8; ++c) t.codes[(g * 32) * 8 + c] = 0;
  }
  const auto w = dequantize_f32(t);
  auto r = requantize_rtn(w, 64, 8, 4, 32, true);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->error.exact()) << r->error.max_abs;
}

TEST(Requantize, GgufQ4_0AndQ8_0MapExactlyOntoTheLogicalTensor) {
  auto f = gguf::File::open(testing::vector_path("gguf_small.gguf"));
  ASSERT_TRUE(f) << f.error().to_string();
  for (const char* name : {"q4_0", "q8_0"}) {
    const gguf::TensorInfo* info = f->find_tensor(name);
    ASSERT_NE(info, nullptr);
    auto t = gguf_to_quant_tensor(*info, f->tensor_bytes(*info));
    ASSERT_TRUE(t) << t.error().to_string();
    ASSERT_TRUE(validate(*t));
    auto ref = gguf::dequantize(info->type, f->tensor_bytes(*info), info->n_elements);
    ASSERT_TRUE(ref);
    const auto ours = dequantize_f32(*t);  // [K, N]; ggml order is [N][K]
    const std::int64_t k = t->rows, n = t->cols;
    for (std::int64_t c = 0; c < n; ++c) {
      for (std::int64_t r = 0; r < k; ++r) ASSERT_EQ(ours[r * n + c], (*ref)[c * k + r]) << name;
    }
    // ...and from there into GPTQ without loss.
    auto gptq = write_layout(*t, Layout::kGptqV2);
    ASSERT_TRUE(gptq) << gptq.error().to_string();
  }
  const gguf::TensorInfo* k4 = f->find_tensor("q4_k");
  auto refused = gguf_to_quant_tensor(*k4, f->tensor_bytes(*k4));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kUnsupported);
}

}  // namespace
}  // namespace epk::layouts
