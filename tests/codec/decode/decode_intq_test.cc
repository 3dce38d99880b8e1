// decode_tensor's intq case: the shared dispatch gives dequantize_intq's bytes for F32/BF16/F16 and refuses others.
#include <gtest/gtest.h>

#include "codec/decode/decode_tensor.h"
#include "codec/layouts/intq_io.h"
#include "tests/codec/layouts/intq_test_util.h"

namespace epk::decode {
namespace {

TEST(DecodeIntq, DispatchEqualsDequantizeIntq) {
  auto t = layouts::testing::random_intq_tensor(3, 70, 9, 32, false, true, true, 5);
  auto e = layouts::intq::encode_int(t, "w", DType::kF16, "gptq");
  ASSERT_TRUE(e);
  auto r = layouts::testing::write_one_and_open("decode", std::move(*e));
  ASSERT_TRUE(r) << r.error().message;
  const auto& entry = r->tensors()[0];
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    ASSERT_TRUE(can_decode(entry, dt));
    std::vector<std::uint8_t> want(decoded_bytes(entry, dt)), got(want.size());
    ASSERT_TRUE(layouts::intq::dequantize_intq(*r, entry, dt, want));
    DecodeTensorOptions opt;
    opt.verify_checksums = true;
    auto st = decode_tensor(*r, entry, dt, got, opt);
    ASSERT_TRUE(st) << st.error().message;
    EXPECT_EQ(got, want);
  }
  EXPECT_FALSE(can_decode(entry, DType::kF8E4M3));
  EXPECT_EQ(decoded_bytes(entry, DType::kI8), 0u);
}

}  // namespace
}  // namespace epk::decode
