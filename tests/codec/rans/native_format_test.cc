// The native profile's metadata (codec/rans/native_format.h): packed and expanded back to the reference arrays bit
// for bit on encoded tensors of odd shapes and rates, edge states and scales, and every corruption named.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codec/common/float_convert.h"
#include "codec/rans/bit_stream.h"
#include "codec/rans/decoder.h"
#include "codec/rans/native_format.h"
#include "codec/rate/encode.h"

namespace epk::rans {
namespace {

EncodedTensor encode_gaussian(std::uint32_t rows, std::uint32_t cols, double bpp, std::uint32_t seed,
                              bool unequal_rows = false, std::uint32_t tile_symbols = 0) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.02f);
  std::vector<float> w(std::size_t(rows) * cols);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = d(rng) * (unequal_rows ? float(1 + (i / cols) % 7) : 1.0f);
  rate::EncodeOptions o;
  o.target_bpp = bpp;
  o.tile_symbols = tile_symbols;
  auto e = rate::encode({reinterpret_cast<const std::byte*>(w.data()), w.size() * 4}, rows, cols, DType::kF32, o,
                        "w");
  EXPECT_TRUE(e.has_value()) << e.error().to_string();
  return std::move(e).value();
}

NativeView view_of(const NativeMetadata& m) {
  return NativeView{m.word_counts, m.states, m.tables, m.scales, m.count_bits, m.scale_shift, m.coset1_vectors};
}

std::vector<float> decode_f32(const LatticeRansStream& s) {
  std::vector<float> out(std::size_t(s.rows) * s.cols);
  const Status st = decode(s, "w", DType::kF32, {reinterpret_cast<std::byte*>(out.data()), out.size() * 4});
  EXPECT_TRUE(st.has_value()) << st.error().to_string();
  return out;
}

// t's scales rounded to the native grid, then t packed.
NativeMetadata pack_rounded(EncodedTensor& t) {
  auto shift = round_scales_to_native(t.scales);
  EXPECT_TRUE(shift.has_value()) << shift.error().to_string();
  auto m = pack_native(t, shift.has_value() ? *shift : 0);
  EXPECT_TRUE(m.has_value()) << m.error().to_string();
  return m.has_value() ? std::move(m).value() : NativeMetadata{};
}

// The bits section 9 gives t's states: a 4-bit length code and the bits below each state's leading one.
std::uint64_t state_bits(const EncodedTensor& t) {
  std::uint64_t bits = 0;
  for (std::uint32_t x : t.states) bits += 4 + std::uint64_t(std::bit_width(x) - 1);
  return bits;
}

// Packs t (scales rounded first) and expands it; the expanded arrays must equal t's.
void expect_round_trip(EncodedTensor& t) {
  auto shift = round_scales_to_native(t.scales);
  ASSERT_TRUE(shift.has_value()) << shift.error().to_string();
  EXPECT_EQ(*shift, native_scale_shift(t.scales));
  auto m = pack_native(t, *shift);
  ASSERT_TRUE(m.has_value()) << m.error().to_string();
  const NativeSizes z = native_sizes(t);
  EXPECT_EQ(z.word_counts, m->word_counts.size());
  EXPECT_EQ(z.states, m->states.size());
  EXPECT_EQ(z.tables, m->tables.size());
  EXPECT_EQ(z.scales, 2 * m->scales.size());
  EXPECT_EQ(z.count_bits, m->count_bits);
  EXPECT_EQ(z.scale_shift, m->scale_shift);
  EXPECT_EQ(z.coset1_vectors, m->coset1_vectors);
  auto e = expand_native(view_of(*m), t.view(), "w");
  ASSERT_TRUE(e.has_value()) << e.error().to_string();
  EXPECT_EQ(e->offsets, t.offsets);
  EXPECT_EQ(e->states, t.states);
  ASSERT_EQ(e->tables.size(), t.tables.size());
  EXPECT_EQ(0, std::memcmp(e->tables.data(), t.tables.data(), t.tables.size() * sizeof(TableMeta)));
  EXPECT_EQ(e->freq_tables, t.freq_tables);
  EXPECT_EQ(e->scales, t.scales);
  const LatticeRansStream s = with_expanded(t.view(), *e);
  ASSERT_TRUE(validate_stream(s, "w").has_value());
  EXPECT_EQ(decode_f32(s), decode_f32(t.view()));
}

TEST(NativeFormat, RoundTripsEncodedTensorsBitForBit) {
  EncodedTensor odd = encode_gaussian(37, 45, 4.0, 1);
  expect_round_trip(odd);
  EncodedTensor one_row = encode_gaussian(1, 8, 3.0, 2);
  expect_round_trip(one_row);
  EncodedTensor unequal = encode_gaussian(301, 1000, 2.0, 3, true);
  expect_round_trip(unequal);
  EncodedTensor eight = encode_gaussian(64, 77, 8.0, 4);  // prob bits 12
  EXPECT_EQ(eight.prob_bits, 12u);
  expect_round_trip(eight);
  // The longest tiles the encoder chooses for the native profile (4 times the default at 4 bpp: codec/rate/
  // tile_length.h), several of them and a partial last one: larger word counts in the one width.
  EncodedTensor long_tiles = encode_gaussian(403, 1000, 4.0, 5, false, 65536);
  EXPECT_EQ(long_tiles.offsets.size() - 1, 7u);  // 50,375 vectors at 7,281 a tile
  expect_round_trip(long_tiles);
}

TEST(NativeFormat, StatesTakeTheirBitLength) {
  EncodedTensor t = encode_gaussian(40, 256, 4.0, 5);
  ASSERT_GE(t.states.size(), 2u);
  t.states[0] = kStateLow;             // the shortest: 4 + 15 bits
  t.states[1] = 0x7fffffffu;           // the longest: 4 + 30 bits
  const NativeMetadata m = pack_rounded(t);
  EXPECT_EQ(m.states.size(), (state_bits(t) + 7) / 8);
  auto e = expand_native(view_of(m), t.view(), "w");
  ASSERT_TRUE(e.has_value()) << e.error().to_string();
  EXPECT_EQ(e->states, t.states);
  t.states[2] = kStateLow - 1;
  EXPECT_FALSE(pack_native(t, m.scale_shift).has_value());
}

TEST(NativeFormat, ScalesRoundToFp16UnderOneShift) {
  // The largest lands in [2^14, 2^15): 16392 is halfway between fp16's 16384 and 16400 and rounds to even.
  std::vector<float> s = {16392.0f, 3.0f, 1.0f / 3.0f};
  auto shift = round_scales_to_native(s);
  ASSERT_TRUE(shift.has_value());
  EXPECT_EQ(*shift, 0);
  EXPECT_EQ(s[0], 16384.0f);
  EXPECT_EQ(s[1], 3.0f);
  EXPECT_EQ(s[2], float_from_f16(f16_from_float(1.0f / 3.0f)));
  // Tiny scales keep their relative precision: the shift follows the largest.
  std::vector<float> tiny = {1e-9f, 3e-10f};
  shift = round_scales_to_native(tiny);
  ASSERT_TRUE(shift.has_value());
  EXPECT_EQ(*shift, std::ilogb(1e-9f) - kScaleTopExponent);
  EXPECT_NEAR(tiny[1] / 3e-10f, 1.0, 1.0 / 2048);
  // Rounding twice changes nothing (the grid is stable).
  std::vector<float> again = tiny;
  ASSERT_TRUE(round_scales_to_native(again).has_value());
  EXPECT_EQ(again, tiny);
}

TEST(NativeFormat, ScalesOutsideTheGridAreRefusedNamingTheRow) {
  std::vector<float> wide = {1.0f, 1.0f, std::ldexp(1.0f, -40)};
  auto r = round_scales_to_native(wide);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("row 2"), std::string::npos) << r.error().message;
  for (float bad : {0.0f, -1.0f, NAN, INFINITY}) {
    std::vector<float> v = {1.0f, bad};
    r = round_scales_to_native(v);
    ASSERT_FALSE(r.has_value());
    EXPECT_NE(r.error().message.find("row 1"), std::string::npos);
  }
  EncodedTensor t = encode_gaussian(16, 64, 4.0, 6);
  auto shift = round_scales_to_native(t.scales);
  ASSERT_TRUE(shift.has_value());
  ASSERT_TRUE(pack_native(t, *shift).has_value());
  // One scale off the grid: pack refuses rather than storing another scale than t's.
  t.scales[3] = std::nextafter(t.scales[3], 1.0f);
  auto m = pack_native(t, *shift);
  ASSERT_FALSE(m.has_value());
  EXPECT_NE(m.error().message.find("row 3"), std::string::npos);
}

// Expands a modified copy of t's packed metadata and expects an error naming `what`.
template <typename Change>
void expect_refused(const char* what, Change change) {
  EncodedTensor t = encode_gaussian(50, 300, 4.0, 7);
  NativeMetadata m = pack_rounded(t);
  change(m);
  auto e = expand_native(view_of(m), t.view(), "f.epk: tensor 'w'");
  ASSERT_FALSE(e.has_value()) << what;
  EXPECT_EQ(e.error().code, ErrorCode::kBadInput);
  EXPECT_NE(e.error().message.find("f.epk: tensor 'w'"), std::string::npos);
  EXPECT_NE(e.error().message.find(what), std::string::npos) << e.error().message;
}

TEST(NativeFormat, CorruptMetadataIsRefusedNamingTheBuffer) {
  expect_refused("states", [](NativeMetadata& m) { m.states.pop_back(); });
  expect_refused("states", [](NativeMetadata& m) { m.states.push_back(0); });
  expect_refused("word_counts", [](NativeMetadata& m) { m.word_counts.pop_back(); });
  expect_refused("word_counts", [](NativeMetadata& m) { m.word_counts[0] ^= 1; });  // the sum moves off the payload
  expect_refused("count_bits", [](NativeMetadata& m) { m.count_bits = 33; });
  expect_refused("coset1_vectors", [](NativeMetadata& m) { m.coset1_vectors = 1u << 30; });
  expect_refused("tables", [](NativeMetadata& m) { m.tables.resize(m.tables.size() / 2); });
  expect_refused("tables", [](NativeMetadata& m) { m.tables.push_back(1); });
  expect_refused("tables", [](NativeMetadata& m) { std::fill(m.tables.begin(), m.tables.end(), 0); });
  expect_refused("scales", [](NativeMetadata& m) { m.scales.pop_back(); });
  expect_refused("scales", [](NativeMetadata& m) { m.scales[7] = 0x7e00; });  // NaN
  expect_refused("scales", [](NativeMetadata& m) { m.scales[7] = 0; });
  expect_refused("scales", [](NativeMetadata& m) { m.scale_shift = 200; });
}

TEST(NativeFormat, PaddingBitsMustBeZero) {
  // A tensor whose states do not end on a byte boundary: set a bit in the last byte's padding.
  EncodedTensor t = encode_gaussian(50, 300, 4.0, 8);
  NativeMetadata m = pack_rounded(t);
  ASSERT_NE(state_bits(t) % 8, 0u) << "the states end on a byte boundary for this seed: pick another";
  m.states.back() = std::uint8_t(m.states.back() | 0x80);
  auto e = expand_native(view_of(m), t.view(), "w");
  ASSERT_FALSE(e.has_value());
  EXPECT_NE(e.error().message.find("states"), std::string::npos);
}

TEST(BitStream, GammaAndFieldsRoundTrip) {
  BitWriter w;
  const std::uint64_t values[] = {1, 2, 3, 4, 7, 8, 255, 256, 65535, 65536, (1ull << 31) + 5};
  for (std::uint64_t v : values) w.gamma(v);
  w.bits(0x5, 3);
  w.bits(0xdeadbeef, 32);
  const std::uint64_t count = w.bit_count();
  const std::vector<std::uint8_t> bytes = w.take();
  EXPECT_EQ(bytes.size(), (count + 7) / 8);
  BitReader r(bytes);
  for (std::uint64_t v : values) {
    std::uint64_t got = 0;
    ASSERT_TRUE(r.gamma(40, got));
    EXPECT_EQ(got, v);
  }
  std::uint32_t f = 0;
  ASSERT_TRUE(r.bits(3, f));
  EXPECT_EQ(f, 5u);
  ASSERT_TRUE(r.bits(32, f));
  EXPECT_EQ(f, 0xdeadbeefu);
  EXPECT_TRUE(r.only_zero_padding());
  EXPECT_FALSE(r.bits(8, f));  // past the end: refused, nothing read
  // A gamma code longer than allowed is refused.
  BitReader r2(bytes);
  std::uint64_t got = 0;
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(r2.gamma(40, got));
  EXPECT_FALSE(r2.gamma(16, got));
}

}  // namespace
}  // namespace epk::rans
