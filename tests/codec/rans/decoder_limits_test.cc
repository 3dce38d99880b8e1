// What a stream's declared geometry and tables may make the scalar decoder do: its scratch stays the size of the
// tensor, and table symbols are bounded so the decoder's integer arithmetic cannot overflow. (Both found by
// tests/fuzz/rans_tile_fuzz; the inputs are in tests/fuzz/corpus/rans_tile/regression_*.)
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "codec/rans/decoder.h"
#include "codec/rate/encode.h"

namespace epk::rans {
namespace {

EncodedTensor small_stream(std::uint32_t rows, std::uint32_t cols) {
  std::mt19937 rng(21);
  std::normal_distribution<float> d(0.0f, 0.05f);
  std::vector<float> w(std::size_t(rows) * cols);
  for (float& v : w) v = d(rng);
  rate::EncodeOptions o;
  o.target_bpp = 4.0;
  auto e = rate::encode({reinterpret_cast<const std::byte*>(w.data()), w.size() * 4}, rows, cols, DType::kF32, o, "w");
  EXPECT_TRUE(e) << e.error().to_string();
  return std::move(e).value();
}

std::vector<float> decode_f32(const LatticeRansStream& s, Status* st) {
  std::vector<float> out(std::size_t(s.rows) * s.cols);
  *st = decode(s, "w", DType::kF32, {reinterpret_cast<std::byte*>(out.data()), out.size() * 4});
  return out;
}

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)  // the one test using it skips there
// Exits 0 when t decodes (whole and check_tiles) to `want` with at most 1 GiB of address space, else 1 (or dies of
// std::bad_alloc).
[[noreturn]] void decode_limited(const EncodedTensor& t, const std::vector<float>& want) {
  rlimit lim{1u << 30, 1u << 30};
  setrlimit(RLIMIT_AS, &lim);
  Status st;
  const std::vector<float> got = decode_f32(t.view(), &st);
  auto tiles = check_tiles(t.view(), "w");
  std::exit(st && tiles && tiles->empty() && std::memcmp(got.data(), want.data(), want.size() * 4) == 0 ? 0 : 1);
}
#endif

// A tensor of 12 vectors is one tile at any tile_symbols >= 1 (a tile holds at least 32 vectors), so the stream
// stays valid with tile_symbols raised to 2^32 - 1, which once sized every tile's scratch at 477 M vectors (15 GiB).
// Decoded in a child limited to 1 GiB of address space: it must succeed and match the original.
TEST(DecoderLimits, HugeTileSymbolsDecodeWithScratchOfTheTensor) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "sanitizers reserve more address space than the limit this test sets";
#else
  EncodedTensor t = small_stream(3, 32);
  ASSERT_EQ(t.offsets.size(), 2u);
  Status st;
  const std::vector<float> want = decode_f32(t.view(), &st);
  ASSERT_TRUE(st) << st.error().to_string();
  t.tile_symbols = 0xFFFFFFFFu;
  ASSERT_TRUE(validate_stream(t.view(), "w"));
  EXPECT_EXIT(decode_limited(t, want), ::testing::ExitedWithCode(0), "");
#endif
}

// Field 7 (z8 = 2m + parity) under coset 0 is table 15. Its symbols are shifted so the largest is exactly 2^28: the
// decoder computes 2 * (2 * m + parity) + coset without overflow (UBSan checks it in the asan preset). One more
// and validate_stream refuses the stream, naming the table.
TEST(DecoderLimits, TableSymbolsBoundedBy2To28) {
  EncodedTensor t = small_stream(3, 32);
  TableMeta& m = t.tables[15];
  ASSERT_GT(m.alphabet, 0);
  m.sym_min = (1 << 28) - m.alphabet + 1;
  ASSERT_TRUE(validate_stream(t.view(), "w"));
  std::vector<std::uint8_t> values(std::size_t(t.rows) * t.cols);
  std::vector<float> row_scales(t.rows);
  EXPECT_TRUE(decode_rowwise(t.view(), "w", RowwiseType::kInt8, {reinterpret_cast<std::byte*>(values.data()), values.size()},
                             row_scales, 0, t.rows));
  Status st;
  decode_f32(t.view(), &st);
  EXPECT_TRUE(st);

  m.sym_min += 1;
  auto bad = validate_stream(t.view(), "w");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("stream_meta row 15"), std::string::npos) << bad.error().message;
  EXPECT_NE(bad.error().message.find("outside [-2^28, 2^28]"), std::string::npos) << bad.error().message;

  m.sym_min = -(1 << 28) - 1;
  EXPECT_FALSE(validate_stream(t.view(), "w"));
}

}  // namespace
}  // namespace epk::rans
