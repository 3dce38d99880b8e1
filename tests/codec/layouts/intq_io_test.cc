#include "codec/layouts/intq_io.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>

#include "codec/common/half.h"
#include "codec/layouts/gguf.h"
#include "tests/codec/layouts/intq_test_util.h"

namespace epk::layouts {
namespace {

using testing::random_intq_tensor;
using testing::write_one_and_open;

void expect_same(const QuantTensor& a, const QuantTensor& b) {
  EXPECT_EQ(a.bits, b.bits);
  EXPECT_EQ(a.rows, b.rows);
  EXPECT_EQ(a.cols, b.cols);
  EXPECT_EQ(a.padded_rows, b.padded_rows);
  EXPECT_EQ(a.padded_cols, b.padded_cols);
  EXPECT_EQ(a.group_size, b.group_size);
  EXPECT_EQ(a.num_groups, b.num_groups);
  EXPECT_EQ(a.scale_dtype, b.scale_dtype);
  EXPECT_EQ(a.codes, b.codes);
  EXPECT_EQ(a.scales, b.scales);
  EXPECT_EQ(a.zeros, b.zeros);
  EXPECT_EQ(a.g_idx, b.g_idx);
  EXPECT_EQ(a.perm, b.perm);
}

using Case = testing::IntqCase;

class IntqRoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(IntqRoundTrip, ReadBackEqualsWritten) {
  const Case c = GetParam();
  QuantTensor t = random_intq_tensor(c.bits, c.rows, c.cols, c.group, c.symmetric, c.act_order, c.perm, 7 + c.bits);
  if (c.rows % 16 != 0) {
    ASSERT_TRUE(pad_to(t, 16, 8));  // padded storage travels too
  }
  for (auto form : {intq::CodeForm::kSmallest, intq::CodeForm::kPacked, intq::CodeForm::kRans}) {
    SCOPED_TRACE(static_cast<int>(form));
    auto e = intq::encode_int(t, "layer.weight", DType::kF16, "gptq", form);
    ASSERT_TRUE(e) << e.error().message;
    auto r = write_one_and_open("rt", std::move(*e));
    ASSERT_TRUE(r) << r.error().message;
    const auto* entry = r->find("layer.weight");
    ASSERT_NE(entry, nullptr);
    EXPECT_EQ(entry->shape,
              (std::vector<std::uint64_t>{static_cast<std::uint64_t>(c.cols), static_cast<std::uint64_t>(c.rows)}));
    auto info = intq::code_info(*r, *entry);
    ASSERT_TRUE(info);
    if (form == intq::CodeForm::kRans) {
      EXPECT_EQ(info->form, "rans");
    } else if (form == intq::CodeForm::kPacked) {
      EXPECT_EQ(info->form, "packed");
    } else {
      EXPECT_LE(info->stored_bytes, info->packed_bytes);
    }
    auto back = intq::read_int(*r, *entry);
    ASSERT_TRUE(back) << back.error().message;
    expect_same(t, *back);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, IntqRoundTrip,
                         ::testing::Values(Case{4, 128, 64, 32, false, false, false},
                                           Case{3, 97, 13, 32, false, true, false},  // 3-bit straddles words
                                           Case{2, 64, 7, 16, true, false, true}, Case{8, 33, 5, 8, true, true, true},
                                           Case{5, 40, 3, 40, false, false, false},
                                           Case{1, 17, 9, 17, false, false, false},
                                           Case{4, 64, 8, 128, false, false, false}));  // group longer than K

// Codes of a GPTQ-style (min/max per group of 128, asymmetric 4-bit) quantization of a Gaussian layer are far from
// uniform: rANS is picked, and the saving is printed. Uniform codes cannot be coded smaller: packed is picked.
TEST(Intq, SmallestFormIsRansForGaussianGptqCodesAndPackedForUniformCodes) {
  const std::int64_t k = 4096, n = 512, g = 128;
  QuantTensor t = make_quant_tensor(4, k, n, g);
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w(static_cast<std::size_t>(k * n));
  for (auto& v : w) v = normal(rng);
  for (std::int64_t grp = 0; grp < k / g; ++grp) {
    for (std::int64_t c = 0; c < n; ++c) {
      float lo = 0, hi = 0;
      for (std::int64_t r = grp * g; r < (grp + 1) * g; ++r) {
        lo = std::min(lo, w[std::size_t(r * n + c)]);
        hi = std::max(hi, w[std::size_t(r * n + c)]);
      }
      const float scale = (hi - lo) / 15.0f;
      const int zero = static_cast<int>(std::lround(-lo / scale));
      t.scales[std::size_t(grp * n + c)] = f16_to_f32(f32_to_f16(scale));
      t.zeros[std::size_t(grp * n + c)] = zero;
      for (std::int64_t r = grp * g; r < (grp + 1) * g; ++r) {
        const long q = std::lround(w[std::size_t(r * n + c)] / scale) + zero;
        t.codes[std::size_t(r * n + c)] = static_cast<std::uint8_t>(std::clamp<long>(q, 0, 15));
      }
    }
  }
  auto gauss = intq::encode_int(t, "gauss", DType::kF16, "gptq");
  ASSERT_TRUE(gauss) << gauss.error().message;
  EXPECT_NE(gauss->spec.params_json.find("\"codes\":\"rans\""), std::string::npos);
  std::uint64_t coded = 0;
  for (std::size_t i = 0; i < gauss->names.size(); ++i) {
    if (gauss->names[i].rfind("code", 0) == 0) coded += gauss->storage[i].size();
  }
  const double packed = static_cast<double>(k * n) * 4 / 8;
  std::printf("GPTQ 4-bit g128 codes of a Gaussian %lldx%lld layer: rans %llu bytes = %.3f bits per code, %.1f%% "
              "smaller than packed\n",
              static_cast<long long>(k), static_cast<long long>(n), static_cast<unsigned long long>(coded),
              8.0 * coded / static_cast<double>(k * n), 100.0 * (1.0 - coded / packed));
  EXPECT_LT(static_cast<double>(coded), 0.95 * packed);

  QuantTensor u = random_intq_tensor(4, k, n, g, false, false, false, 43);
  auto uniform = intq::encode_int(u, "uniform", DType::kF16, "gptq");
  ASSERT_TRUE(uniform);
  EXPECT_NE(uniform->spec.params_json.find("\"codes\":\"packed\""), std::string::npos);
  auto forced = intq::encode_int(u, "uniform", DType::kF16, "gptq", intq::CodeForm::kRans);
  ASSERT_TRUE(forced);
  std::uint64_t forced_bytes = 0;
  for (std::size_t i = 0; i < forced->names.size(); ++i) {
    if (forced->names[i].rfind("code", 0) == 0) forced_bytes += forced->storage[i].size();
  }
  std::printf("uniform 4-bit codes: rans would take %.4f bits per code, packed 4\n",
              8.0 * forced_bytes / static_cast<double>(k * n));
  EXPECT_GT(static_cast<double>(forced_bytes), packed);
}

TEST(Intq, SymmetricStaticTensorStoresOnlyCodesAndScales) {
  QuantTensor t = random_intq_tensor(4, 64, 16, 32, true, false, false, 3);
  auto e = intq::encode_int(t, "w", DType::kF16, "gptq");
  ASSERT_TRUE(e);
  ASSERT_EQ(e->names.size(), 2u);
  EXPECT_EQ(e->names[0], "codes");
  EXPECT_EQ(e->storage[0].size(), 64u * 16 * 4 / 8);
  EXPECT_EQ(e->names[1], "scales");
  EXPECT_EQ(e->storage[1].size(), 2u * 16 * 2);
}

TEST(Intq, DequantizeIsTheTransposedUnpermutedLogicalMatrix) {
  QuantTensor t = random_intq_tensor(4, 96, 11, 32, false, true, true, 11);
  auto r = write_one_and_open("deq", std::move(*intq::encode_int(t, "w", DType::kBF16, "gptq")));
  ASSERT_TRUE(r) << r.error().message;
  const auto& entry = r->tensors()[0];
  const auto f32 = dequantize_f32(t);
  const auto b16 = dequantize_bf16(t);
  std::vector<std::uint8_t> out32(96 * 11 * 4), out16(96 * 11 * 2);
  auto st32 = intq::dequantize_intq(*r, entry, DType::kF32, out32);
  ASSERT_TRUE(st32) << st32.error().message;
  ASSERT_TRUE(intq::dequantize_intq(*r, entry, DType::kBF16, out16));
  for (int k = 0; k < 96; ++k) {
    const int feature = t.perm[static_cast<std::size_t>(k)];
    for (int n = 0; n < 11; ++n) {
      float got;
      std::memcpy(&got, out32.data() + 4 * (n * 96 + feature), 4);
      ASSERT_EQ(got, f32[static_cast<std::size_t>(k * 11 + n)]) << k << "," << n;
      std::uint16_t got16;
      std::memcpy(&got16, out16.data() + 2 * (n * 96 + feature), 2);
      ASSERT_EQ(got16, b16[static_cast<std::size_t>(k * 11 + n)]);
    }
  }
  std::vector<std::uint8_t> short_dst(10);
  EXPECT_FALSE(intq::dequantize_intq(*r, entry, DType::kF32, short_dst));
}

TEST(Intq, RowShardPermIsRefusedAtEncode) {
  QuantTensor t = random_intq_tensor(4, 32, 8, 32, true, false, true, 5);
  t.perm[0] = 1000;  // a global feature index: distinct but outside the tensor's rows
  t.perm[1] = 1001;
  auto e = intq::encode_int(t, "w", DType::kF16, "gptq");
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message.find("perm"), std::string::npos);
}

TEST(Intq, GgufBlocksAreKeptVerbatimAndDequantizeLikeGguf) {
  // Two Q4_K rows of 256 (one super-block each): random bytes with finite f16 d/dmin.
  const std::uint32_t type = static_cast<std::uint32_t>(gguf::GgmlType::kQ4_K);
  const auto traits = *gguf::type_traits(type);
  std::vector<std::uint8_t> blocks = std::vector<std::uint8_t>(2 * traits.type_size);
  std::mt19937 rng(9);
  for (auto& b : blocks) b = static_cast<std::uint8_t>(rng());
  for (int r = 0; r < 2; ++r) {
    store_le<std::uint16_t>(blocks.data() + r * traits.type_size, f32_to_f16(0.01f * (r + 1)));
    store_le<std::uint16_t>(blocks.data() + r * traits.type_size + 2, f32_to_f16(0.002f));
  }
  gguf::TensorInfo info;
  info.name = "blk.0.ffn_up.weight";
  info.ne = {256, 2};
  info.type = type;
  info.n_elements = 512;
  info.n_bytes = blocks.size();
  auto r = write_one_and_open("gguf", std::move(*intq::encode_gguf(info, blocks, std::string(info.name))));
  ASSERT_TRUE(r) << r.error().message;
  const auto& entry = r->tensors()[0];
  EXPECT_EQ(entry.shape, (std::vector<std::uint64_t>{2, 256}));
  auto want = gguf::dequantize(type, blocks, 512);
  ASSERT_TRUE(want);
  std::vector<std::uint8_t> out(512 * 4);
  ASSERT_TRUE(intq::dequantize_intq(*r, entry, DType::kF32, out));
  for (std::size_t i = 0; i < 512; ++i) {
    float got;
    std::memcpy(&got, out.data() + 4 * i, 4);
    ASSERT_EQ(got, (*want)[i]) << i;
  }
  auto fp = intq::footprint_of_entry(*r, entry);
  ASSERT_TRUE(fp);
  EXPECT_DOUBLE_EQ(fp->bits_per_weight(), 4.5);  // Q4_K: 144 bytes per 256
  EXPECT_FALSE(intq::read_int(*r, entry));       // not the integer kind
}

TEST(Intq, Bnb4StateIsKeptVerbatimAndDequantizesLikeBnb) {
  const std::int64_t rows = 3, cols = 40;  // 120 weights, blocksize 64: two blocks, the last one partial
  std::mt19937 rng(4);
  std::vector<std::uint8_t> weight(60);
  for (auto& b : weight) b = static_cast<std::uint8_t>(rng());
  std::vector<float> absmax = {0.5f, 1.25f};
  std::vector<std::uint8_t> absmax_bytes(8);
  std::memcpy(absmax_bytes.data(), absmax.data(), 8);
  std::vector<std::uint8_t> qmap(64);
  std::memcpy(qmap.data(), bnb::kNf4Levels.data(), 64);
  const std::string state = R"({"quant_type":"nf4","blocksize":64,"dtype":"bfloat16","shape":[3,40]})";
  std::vector<std::uint8_t> state_bytes(state.begin(), state.end());
  bnb::Views v;
  v.weight = TensorView{"w.weight", DType::kU8, {60, 1}, weight};
  v.absmax = TensorView{"w.weight.absmax", DType::kF32, {2}, absmax_bytes};
  v.quant_map = TensorView{"w.weight.quant_map", DType::kF32, {16}, qmap};
  v.quant_state =
      TensorView{"w.weight.quant_state", DType::kU8, {static_cast<std::int64_t>(state.size())}, state_bytes};
  auto st = bnb::read_state(v);
  ASSERT_TRUE(st) << st.error().message;
  auto want = bnb::dequantize_16(v.weight, *st);
  ASSERT_TRUE(want);
  auto e = intq::encode_bnb4(v, "w.weight");
  ASSERT_TRUE(e) << e.error().message;
  auto r = write_one_and_open("bnb", std::move(*e));
  ASSERT_TRUE(r) << r.error().message;
  std::vector<std::uint8_t> out(rows * cols * 2);
  ASSERT_TRUE(intq::dequantize_intq(*r, r->tensors()[0], DType::kBF16, out));
  EXPECT_EQ(std::memcmp(out.data(), want->data(), out.size()), 0);
  auto fp = intq::footprint_of_entry(*r, r->tensors()[0]);
  ASSERT_TRUE(fp);
  EXPECT_EQ(fp->code_bytes, 60u);
  EXPECT_EQ(fp->scale_bytes, 8u + 64u);
}

}  // namespace
}  // namespace epk::layouts
