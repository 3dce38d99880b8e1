// codec/decode/decode_tensor: the one per-encoding dispatch (raw with dtype conversion, lattice-rans).
#include "codec/decode/decode_tensor.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "codec/common/half.h"
#include "codec/container/writer.h"
#include "codec/rans/container_io.h"
#include "codec/rate/encode.h"
#include "tests/support/bytes.h"
#include "tests/support/scratch_dir.h"

namespace epk::decode {
namespace {

namespace fs = std::filesystem;

using test::bytes_of;

class DecodeTensor : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = epk::test::test_scratch_file("epk_decode_tensor", ".epk");
    std::mt19937 rng(3);
    std::normal_distribution<float> d(0.0f, 0.1f);
    weights_.resize(19 * 45);
    for (float& v : weights_) v = d(rng);
    rate::EncodeOptions o;
    o.target_bpp = 5.0;
    auto e = rate::encode({reinterpret_cast<const std::byte*>(weights_.data()), weights_.size() * 4}, 19, 45,
                          DType::kF32, o, "w");
    ASSERT_TRUE(e);
    encoded_ = std::move(*e);
    // Edge values: a tie for bf16 rounding (1 + 2^-8 rounds to even 1.0), 1 + 3*2^-8 (rounds up), a subnormal, -0.
    raw_f32_ = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1e-40f, -0.0f, 65504.0f, 1e5f, -3.5f};
    raw_bf16_ = {0x3f80, 0xbfc0, 0x0001, 0x7f7f, 0x8000};
    auto w = container::Writer::create(path_, {});
    ASSERT_TRUE(w);
    auto form = rans::to_container(encoded_, "lin.weight", {});
    ASSERT_TRUE(w->add_tensor(form.spec, form.buffers));
    container::BufferData a{"data", bytes_of(raw_f32_)};
    ASSERT_TRUE(w->add_tensor({"raw.f32", {7}, DType::kF32, container::Encoding::kRaw, "{}"}, {a}));
    container::BufferData b{"data", bytes_of(raw_bf16_)};
    ASSERT_TRUE(w->add_tensor({"raw.bf16", {5}, DType::kBF16, container::Encoding::kRaw, "{}"}, {b}));
    container::BufferData c{"data", bytes_of(raw_u8_)};
    ASSERT_TRUE(w->add_tensor({"raw.u8", {3}, DType::kU8, container::Encoding::kRaw, "{}"}, {c}));
    ASSERT_TRUE(w->finish());
    auto r = container::Reader::open(path_);
    ASSERT_TRUE(r);
    reader_ = std::move(*r);
  }
  void TearDown() override { std::remove(path_.c_str()); }
  const container::TensorEntry& entry(const char* name) { return *reader_.find(name); }

  std::string path_;
  std::vector<float> weights_;
  rans::EncodedTensor encoded_;
  std::vector<float> raw_f32_;
  std::vector<std::uint16_t> raw_bf16_;
  std::vector<std::uint8_t> raw_u8_ = {1, 2, 3};
  container::Reader reader_;
};

TEST_F(DecodeTensor, LatticeRansEqualsTheScalarDecoderInEveryDtype) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16, DType::kF8E4M3, DType::kF8E5M2, DType::kI8}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const auto& e = entry("lin.weight");
    ASSERT_TRUE(can_decode(e, t));
    std::vector<std::uint8_t> got(decoded_bytes(e, t)), want(got.size());
    DecodeTensorOptions o;
    o.threads = 2;
    o.verify_checksums = true;
    ASSERT_TRUE(decode_tensor(reader_, e, t, got, o));
    ASSERT_TRUE(rans::decode(encoded_.view(), "w", t, {reinterpret_cast<std::byte*>(want.data()), want.size()}));
    EXPECT_EQ(got, want);
  }
}

TEST_F(DecodeTensor, RowwiseEqualsTheScalarRowwiseDecoder) {
  const auto& e = entry("lin.weight");
  ASSERT_TRUE(can_decode_rowwise(e));
  for (auto type : {rans::RowwiseType::kInt8, rans::RowwiseType::kF8E4M3}) {
    std::vector<std::uint8_t> got(19 * 45);
    std::vector<float> got_scales(19);
    std::vector<std::byte> want(got.size());
    std::vector<float> want_scales(19);
    DecodeTensorOptions o;
    o.verify_checksums = true;
    ASSERT_TRUE(decode_tensor_rowwise(reader_, e, type, got, got_scales, o));
    ASSERT_TRUE(rans::decode_rowwise(encoded_.view(), "w", type, want, want_scales, 0, 19));
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size()));
    EXPECT_EQ(got_scales, want_scales);
  }
}

TEST_F(DecodeTensor, RowwiseOfARawTensorIsUnsupported) {
  EXPECT_FALSE(can_decode_rowwise(entry("raw.f32")));
  std::vector<std::uint8_t> v(7);
  std::vector<float> sc(1);
  auto st = decode_tensor_rowwise(reader_, entry("raw.f32"), rans::RowwiseType::kInt8, v, sc);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(st.error().message.find("raw.f32"), std::string::npos) << st.error().message;
}

TEST_F(DecodeTensor, RawSameDtypeIsACopy) {
  std::vector<std::uint8_t> out(7 * 4);
  ASSERT_TRUE(decode_tensor(reader_, entry("raw.f32"), DType::kF32, out));
  EXPECT_EQ(0, std::memcmp(out.data(), raw_f32_.data(), out.size()));
  std::vector<std::uint8_t> u8(3);
  ASSERT_TRUE(decode_tensor(reader_, entry("raw.u8"), DType::kU8, u8));
  EXPECT_EQ(u8, raw_u8_);
}

TEST_F(DecodeTensor, RawF32ToBf16AndF16RoundsLikeTorch) {
  std::vector<std::uint16_t> bf(7), h(7);
  ASSERT_TRUE(decode_tensor(reader_, entry("raw.f32"), DType::kBF16, {reinterpret_cast<std::uint8_t*>(bf.data()), 14}));
  ASSERT_TRUE(decode_tensor(reader_, entry("raw.f32"), DType::kF16, {reinterpret_cast<std::uint8_t*>(h.data()), 14}));
  EXPECT_EQ(bf[0], 0x3f80);  // tie to even
  EXPECT_EQ(bf[1], 0x3f82);  // rounds up
  EXPECT_EQ(bf[3], 0x8000);  // -0 keeps its sign
  EXPECT_EQ(bf[6], 0xc060);
  EXPECT_EQ(h[4], 0x7bff);  // 65504, the largest half
  EXPECT_EQ(h[5], 0x7c00);  // 1e5 overflows to infinity, as torch does
  EXPECT_EQ(h[2], 0x0000);  // 1e-40 underflows to +0
  for (std::size_t i = 0; i < 7; ++i) {
    EXPECT_EQ(bf[i], f32_to_bf16(raw_f32_[i])) << i;
    EXPECT_EQ(h[i], f32_to_f16(raw_f32_[i])) << i;
  }
}

TEST_F(DecodeTensor, RawBf16ToF32IsExact) {
  std::vector<float> out(5);
  ASSERT_TRUE(
      decode_tensor(reader_, entry("raw.bf16"), DType::kF32, {reinterpret_cast<std::uint8_t*>(out.data()), 20}));
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -1.5f);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(out[2]), 0x00010000u);  // a bf16 subnormal widens exactly
  EXPECT_EQ(out[3], std::bit_cast<float>(0x7f7f0000u));
  EXPECT_EQ(std::bit_cast<std::uint32_t>(out[4]), 0x80000000u);
}

TEST_F(DecodeTensor, UnsupportedPairsAndWrongSizesAreErrors) {
  std::vector<std::uint8_t> out(12);
  EXPECT_FALSE(can_decode(entry("raw.u8"), DType::kF32));
  EXPECT_EQ(decoded_bytes(entry("raw.u8"), DType::kF32), 0u);
  auto st = decode_tensor(reader_, entry("raw.u8"), DType::kF32, out);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(st.error().message.find("raw.u8"), std::string::npos);
  std::vector<std::uint8_t> small(10);
  st = decode_tensor(reader_, entry("raw.f32"), DType::kBF16, small);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, ErrorCode::kInvalidArgument);
  EXPECT_FALSE(can_decode(entry("lin.weight"), DType::kU8));
}

TEST_F(DecodeTensor, VerifyChecksumsCatchesAFlippedByte) {
  const auto& e = entry("lin.weight");
  const std::uint64_t at = e.buffers[0].offset + 3;  // payload
  reader_ = container::Reader();
  {
    std::fstream f(path_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(std::streamoff(at));
    char c;
    f.read(&c, 1);
    c = char(c ^ 1);
    f.seekp(std::streamoff(at));
    f.write(&c, 1);
  }
  auto r = container::Reader::open(path_);
  ASSERT_TRUE(r);
  const auto& e2 = *r->find("lin.weight");
  std::vector<std::uint8_t> out(decoded_bytes(e2, DType::kF32));
  DecodeTensorOptions o;
  o.verify_checksums = true;
  auto st = decode_tensor(*r, e2, DType::kF32, out, o);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, ErrorCode::kChecksum);
  EXPECT_NE(st.error().message.find("lin.weight"), std::string::npos);
}

}  // namespace
}  // namespace epk::decode
