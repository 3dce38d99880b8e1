// Encoder -> decoder round trips over targets and output dtypes, and per-tile detection of corrupt streams.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codec/common/float_convert.h"
#include "codec/rans/decoder.h"
#include "codec/rans/encoder.h"
#include "codec/rans/reference_format.h"
#include "codec/rate/encode.h"

namespace epk::rans {
namespace {

std::vector<float> gaussian(std::size_t n, std::uint32_t seed, float std = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, std);
  std::vector<float> w(n);
  for (float& v : w) v = d(rng);
  return w;
}

std::span<const std::byte> as_bytes(const std::vector<float>& w) {
  return {reinterpret_cast<const std::byte*>(w.data()), w.size() * 4};
}

EncodedTensor encode_or_die(const std::vector<float>& w, std::uint32_t rows, std::uint32_t cols, double bpp) {
  rate::EncodeOptions o;
  o.target_bpp = bpp;
  o.threads = 2;
  auto e = rate::encode(as_bytes(w), rows, cols, DType::kF32, o, "w");
  EXPECT_TRUE(e.has_value()) << e.error().to_string();
  return std::move(e).value();
}

std::vector<float> decode_f32(const EncodedTensor& t) {
  std::vector<float> out(std::size_t(t.rows) * t.cols);
  auto st = decode(t.view(), "w", DType::kF32, {reinterpret_cast<std::byte*>(out.data()), out.size() * 4});
  EXPECT_TRUE(st.has_value()) << st.error().to_string();
  return out;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0, n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    e += double(a[i] - b[i]) * double(a[i] - b[i]);
    n += double(a[i]) * a[i];
  }
  return std::sqrt(e / n);
}

TEST(RoundTrip, ErrorFallsAsTheTargetRises) {
  const std::uint32_t rows = 97, cols = 203;  // cols % 8 != 0, several tiles at high rates
  const auto w = gaussian(std::size_t(rows) * cols, 1);
  double last = 1e9;
  for (double bpp : {2.0, 3.0, 4.0, 5.0, 6.0, 8.0}) {
    const EncodedTensor t = encode_or_die(w, rows, cols, bpp);
    const double err = rel_l2(w, decode_f32(t));
    EXPECT_LT(err, last) << bpp;
    last = err;
  }
  EXPECT_LT(last, 0.03);  // 8 bpp on 20k weights: tile states and tables cost a share
}

TEST(RoundTrip, EveryOutputDtypeIsTheSnappedFloat32) {
  const std::uint32_t rows = 31, cols = 77;
  auto w = gaussian(std::size_t(rows) * cols, 2, 3.0f);
  w[5] = 1e6f;  // saturates fp16, fp8 and int8
  w[6] = -1e6f;
  const EncodedTensor t = encode_or_die(w, rows, cols, 6.0);
  const std::vector<float> f = decode_f32(t);
  const std::size_t n = f.size();
  std::vector<std::uint16_t> bf(n), h(n);
  std::vector<std::uint8_t> e4(n), e5(n), i8(n);
  auto dec = [&](DType d, void* p, std::size_t bytes) {
    auto st = decode(t.view(), "w", d, {reinterpret_cast<std::byte*>(p), bytes});
    ASSERT_TRUE(st.has_value()) << st.error().to_string();
  };
  dec(DType::kBF16, bf.data(), n * 2);
  dec(DType::kF16, h.data(), n * 2);
  dec(DType::kF8E4M3, e4.data(), n);
  dec(DType::kF8E5M2, e5.data(), n);
  dec(DType::kI8, i8.data(), n);
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(bf[i], bf16_from_float(f[i])) << i;
    ASSERT_EQ(h[i], f16_from_float(std::clamp(f[i], -kF16Max, kF16Max))) << i;
    ASSERT_EQ(e4[i], f8e4m3_from_float(std::clamp(f[i], -448.0f, 448.0f))) << i;
    ASSERT_EQ(e5[i], f8e5m2_from_float(std::clamp(f[i], -57344.0f, 57344.0f))) << i;
    ASSERT_EQ(std::int8_t(i8[i]), std::int8_t(std::clamp(std::nearbyint(f[i]), -128.0f, 127.0f))) << i;
  }
  EXPECT_EQ(float_from_f16(h[5]), 65504.0f);
  EXPECT_EQ(float_from_f8e4m3(e4[6]), -448.0f);
  EXPECT_EQ(std::int8_t(i8[5]), 127);
}

TEST(RoundTrip, SingleVectorSingleRowAndZeroTensor) {
  for (auto [rows, cols] : {std::pair{1u, 8u}, std::pair{1u, 3u}, std::pair{1u, 1001u}, std::pair{5u, 16u}}) {
    const auto w = gaussian(std::size_t(rows) * cols, rows + cols);
    const EncodedTensor t = encode_or_die(w, rows, cols, 4.0);
    EXPECT_EQ(decode_f32(t).size(), w.size());
  }
  const std::vector<float> zeros(4 * 24, 0.0f);
  const EncodedTensor t = encode_or_die(zeros, 4, 24, 4.0);
  for (float v : decode_f32(t)) EXPECT_EQ(v, 0.0f);
}

TEST(RoundTrip, RowRangeDecodesOnlyItsTiles) {
  const std::uint32_t rows = 300, cols = 64;  // 2400 vectors, 455 per tile at 8 bpp: 6 tiles
  const auto w = gaussian(std::size_t(rows) * cols, 3);
  EncodedTensor t = encode_or_die(w, rows, cols, 8.0);
  ASSERT_GE(t.offsets.size(), 6u);
  const std::vector<float> whole = decode_f32(t);
  // Corrupt the first tile: rows inside later tiles still decode.
  t.states[0] ^= 0x1234;
  std::vector<float> part(std::size_t(100) * cols);
  auto st = decode_rows(t.view(), "w", DType::kF32, {reinterpret_cast<std::byte*>(part.data()), part.size() * 4},
                        150, 250);
  ASSERT_TRUE(st.has_value()) << st.error().to_string();
  EXPECT_EQ(0, std::memcmp(part.data(), whole.data() + std::size_t(150) * cols, part.size() * 4));
}

TEST(RoundTrip, PlanDecodesRowRangesLikeTheWhole) {
  const std::uint32_t rows = 123, cols = 77;
  const auto w = gaussian(std::size_t(rows) * cols, 8);
  const EncodedTensor t = encode_or_die(w, rows, cols, 5.0);
  const std::vector<float> whole = decode_f32(t);
  auto plan = DecodePlan::create(t.view(), "w");
  ASSERT_TRUE(plan.has_value()) << plan.error().to_string();
  const DecodePlan moved = std::move(plan).value();
  for (auto [r0, r1] : {std::pair{0u, 1u}, std::pair{5u, 60u}, std::pair{122u, 123u}, std::pair{0u, 123u},
                        std::pair{40u, 40u}}) {
    std::vector<float> part(std::size_t(r1 - r0) * cols);
    auto st = moved.decode_rows(DType::kF32, {reinterpret_cast<std::byte*>(part.data()), part.size() * 4}, r0, r1, 2);
    ASSERT_TRUE(st.has_value()) << st.error().to_string();
    if (!part.empty()) {
      EXPECT_EQ(0, std::memcmp(part.data(), whole.data() + std::size_t(r0) * cols, part.size() * 4)) << r0;
    }
  }
  std::vector<float> bad(10);
  EXPECT_FALSE(moved.decode_rows(DType::kF32, {reinterpret_cast<std::byte*>(bad.data()), 40}, 0, 2).has_value());
  EXPECT_FALSE(moved.decode_rows(DType::kF32, {reinterpret_cast<std::byte*>(bad.data()), 0}, 3, 2).has_value());
  EXPECT_FALSE(moved.decode_rows(DType::kU32, {reinterpret_cast<std::byte*>(bad.data()), 0}, 0, 0).has_value());
}

TEST(RoundTrip, RdoKeepsTheRateAndDoesNotRaiseError) {
  // rows with different spectra: RDO moves bits between them
  const std::uint32_t rows = 128, cols = 256;
  std::vector<float> w = gaussian(std::size_t(rows) * cols, 4);
  std::mt19937 rng(5);
  std::student_t_distribution<float> st(2.5f);
  for (std::uint32_t r = 0; r < rows; r += 2) {
    for (std::uint32_t c = 0; c < cols; ++c) w[std::size_t(r) * cols + c] = st(rng);
  }
  rate::EncodeOptions o;
  o.target_bpp = 3.0;
  auto base = rate::encode(as_bytes(w), rows, cols, DType::kF32, o, "w");
  o.rdo_sweeps = 2;
  auto rdo = rate::encode(as_bytes(w), rows, cols, DType::kF32, o, "w");
  ASSERT_TRUE(base.has_value() && rdo.has_value());
  const double b_bytes = double(base->buffer_bytes()), r_bytes = double(rdo->buffer_bytes());
  EXPECT_NEAR(r_bytes / b_bytes, 1.0, 0.02);
  EXPECT_LE(rel_l2(w, decode_f32(*rdo)), rel_l2(w, decode_f32(*base)) * 1.005);
}

// ---- corrupt streams: every fault is found, reported with its tile, and nothing crashes (run under asan) ----

class Corrupt : public ::testing::Test {
 protected:
  void SetUp() override {
    w_ = gaussian(std::size_t(rows_) * cols_, 7);
    good_ = encode_or_die(w_, rows_, cols_, 8.0);  // 4096-symbol tiles: 455 vectors, 5 tiles
    ASSERT_EQ(good_.offsets.size(), 6u);
  }
  Status run(const EncodedTensor& t, std::vector<TileFaultRecord>* faults) {
    std::vector<float> out(w_.size());
    return decode(t.view(), "w", DType::kF32, {reinterpret_cast<std::byte*>(out.data()), out.size() * 4}, 2, faults);
  }
  std::uint32_t rows_ = 71, cols_ = 256;  // 2272 vectors
  std::vector<float> w_;
  EncodedTensor good_;
};

TEST_F(Corrupt, FlippedPayloadBitIsReportedForItsTile) {
  for (std::uint32_t tile : {0u, 2u, 4u}) {
    EncodedTensor t = good_;
    const std::uint32_t mid = (t.offsets[tile] + t.offsets[tile + 1]) / 2;
    t.payload[mid] ^= 0x0100;
    std::vector<TileFaultRecord> faults;
    Status st = run(t, &faults);
    ASSERT_FALSE(st.has_value());
    EXPECT_EQ(st.error().code, ErrorCode::kCorruptTile);
    ASSERT_EQ(faults.size(), 1u);
    EXPECT_EQ(faults[0].tile, tile);
    EXPECT_NE(st.error().message.find("tile " + std::to_string(tile)), std::string::npos) << st.error().message;
    EXPECT_NE(st.error().message.find("'w'"), std::string::npos);
  }
}

TEST_F(Corrupt, WrongFinalStateIsReported) {
  EncodedTensor t = good_;
  t.states[3 * 32 + 5] += 1;
  std::vector<TileFaultRecord> faults;
  ASSERT_FALSE(run(t, &faults).has_value());
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_EQ(faults[0].tile, 3u);
  t = good_;
  t.states[32] = 5;  // below 2^15
  faults.clear();
  ASSERT_FALSE(run(t, &faults).has_value());
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_EQ(faults[0].fault, TileFault::kBadInitialState);
}

// Swapping whole tiles together with their states yields another valid stream (only the container's checksums can
// see it); swapping the payloads under the states is what the end-of-tile check catches.
TEST_F(Corrupt, SwappedTilePayloadsAreReported) {
  EncodedTensor t = good_;
  // swap the payload words of tiles 1 and 2, keeping the offsets consistent and the states in place
  const std::uint32_t a0 = t.offsets[1], a1 = t.offsets[2], b1 = t.offsets[3];
  std::vector<std::uint16_t> swapped(t.payload.begin() + b1 - (b1 - a1), t.payload.begin() + b1);
  swapped.insert(swapped.end(), t.payload.begin() + a0, t.payload.begin() + a1);
  std::copy(swapped.begin(), swapped.end(), t.payload.begin() + a0);
  t.offsets[2] = a0 + (b1 - a1);
  std::vector<TileFaultRecord> faults;
  ASSERT_FALSE(run(t, &faults).has_value());
  ASSERT_GE(faults.size(), 1u);
  for (const TileFaultRecord& f : faults) EXPECT_TRUE(f.tile == 1 || f.tile == 2) << f.tile;
}

TEST_F(Corrupt, TruncatedTileIsReported) {
  EncodedTensor t = good_;
  // drop the first two words of tile 2: offsets shift, tile 2 runs out
  t.payload.erase(t.payload.begin() + t.offsets[2], t.payload.begin() + t.offsets[2] + 2);
  for (std::size_t i = 3; i < t.offsets.size(); ++i) t.offsets[i] -= 2;
  std::vector<TileFaultRecord> faults;
  ASSERT_FALSE(run(t, &faults).has_value());
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_EQ(faults[0].tile, 2u);
}

TEST_F(Corrupt, BadTablesAreRefusedBeforeDecoding) {
  EncodedTensor t = good_;
  t.freq_tables[3] += 1;  // a table no longer sums to 2^pb
  Status st = run(t, nullptr);
  ASSERT_FALSE(st.has_value());
  EXPECT_EQ(st.error().code, ErrorCode::kBadInput);
  EXPECT_NE(st.error().message.find("sum"), std::string::npos) << st.error().message;
  t = good_;
  t.tables[5].alphabet += 1;
  EXPECT_FALSE(run(t, nullptr).has_value());
  t = good_;
  t.tables[0].n_symbols -= 1;
  EXPECT_FALSE(run(t, nullptr).has_value());
  t = good_;
  t.offsets[2] = t.offsets[3] + 1;  // not monotone
  EXPECT_FALSE(run(t, nullptr).has_value());
  t = good_;
  t.offsets.back() += 1;  // past the payload
  EXPECT_FALSE(run(t, nullptr).has_value());
  t = good_;
  t.scales[3] = std::nanf("");
  EXPECT_FALSE(run(t, nullptr).has_value());
  t = good_;
  t.prob_bits = 16;
  EXPECT_FALSE(run(t, nullptr).has_value());
  t = good_;
  t.states.pop_back();
  EXPECT_FALSE(run(t, nullptr).has_value());
}

TEST_F(Corrupt, RandomDamageNeverCrashes) {
  std::mt19937 rng(99);
  int detected = 0;
  for (int trial = 0; trial < 300; ++trial) {
    EncodedTensor t = good_;
    const int flips = 1 + int(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      switch (rng() % 4) {
        case 0: t.payload[rng() % t.payload.size()] ^= std::uint16_t(1u << (rng() % 16)); break;
        case 1: t.states[rng() % t.states.size()] ^= 1u << (rng() % 32); break;
        case 2: t.freq_tables[rng() % t.freq_tables.size()] ^= std::uint16_t(1u << (rng() % 16)); break;
        default: t.offsets[1 + rng() % (t.offsets.size() - 2)] ^= 1u << (rng() % 12); break;
      }
    }
    std::vector<TileFaultRecord> faults;
    detected += !run(t, &faults).has_value();
    auto checked = check_tiles(t.view(), "w", 1);
    EXPECT_EQ(checked.has_value() && checked->empty(), faults.empty() && run(t, nullptr).has_value());
  }
  EXPECT_GT(detected, 250);
}

TEST_F(Corrupt, BlobParserRefusesDamagedHeaders) {
  auto blob = write_reference_quant_state(good_);
  ASSERT_TRUE(blob.has_value());
  auto parsed = parse_reference_quant_state(*blob, "w");
  ASSERT_TRUE(parsed.has_value()) << parsed.error().to_string();
  std::vector<std::byte> b = *blob;
  b.resize(b.size() - 16);  // truncated
  EXPECT_FALSE(parse_reference_quant_state(b, "w").has_value());
  b = *blob;
  b[0] = std::byte{0xff};  // header length past the end
  b[5] = std::byte{0x7f};
  EXPECT_FALSE(parse_reference_quant_state(b, "w").has_value());
  b = *blob;
  b[10] = std::byte{'!'};  // broken JSON
  EXPECT_FALSE(parse_reference_quant_state(b, "w").has_value());
  std::mt19937 rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    b = *blob;
    b[rng() % std::min<std::size_t>(b.size(), 400)] ^= std::byte(1u << (rng() % 8));
    auto r = parse_reference_quant_state(b, "w");  // any outcome but a crash
    (void)r;
  }
}

}  // namespace
}  // namespace epk::rans
