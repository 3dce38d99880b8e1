// The device encoder against the CPU encoder, byte for byte: first step by step (the same calls on the CPU steps and
// the device steps, each result compared, so a mismatch names its step), then whole encodes (rate::encode against
// cuda::DeviceEncoder) and pack_tensor's choice and error, over shapes from 1x8 to 10240x3840, rates 2 / 4 / 8 bpp,
// BF16 / F16 / F32 sources, heavy tails, zero rows and an all-zero tensor. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "codec/common/float_convert.h"
#include "codec/cuda/encode/encode.h"
#include "codec/cuda/encode/encode_steps.h"
#include "codec/rate/choose.h"
#include "codec/rate/encode.h"
#include "codec/rate/encode_steps.h"
#include "codec/rate/search.h"
#include "codec/rans/profile.h"

namespace epk {
namespace {

int threads() { return int(std::max(1u, std::thread::hardware_concurrency())); }

enum class Kind { kGaussian, kHeavyTail, kZeroRows, kAllZero };

// rows x cols of dtype, Gaussian (sigma 0.02) with the kind's twist, fixed seed.
std::vector<std::byte> make_tensor(std::uint32_t rows, std::uint32_t cols, DType dtype, Kind kind,
                                   std::uint64_t seed) {
  const std::size_t n = std::size_t(rows) * cols;
  const std::size_t es = std::size_t(dtype_bits(dtype) / 8);
  std::vector<std::byte> out(n * es);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 0.02f);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (std::size_t i = 0; i < n; ++i) {
    float v = g(rng);
    if (kind == Kind::kHeavyTail && u(rng) < 0.001f) v *= 40.0f;
    if (kind == Kind::kZeroRows && (i / cols) % 3 == 1) v = 0.0f;
    if (kind == Kind::kAllZero) v = 0.0f;
    if (dtype == DType::kBF16) {
      const std::uint16_t b = bf16_from_float(v);
      std::memcpy(&out[i * 2], &b, 2);
    } else if (dtype == DType::kF16) {
      const std::uint16_t b = f16_from_float(v);
      std::memcpy(&out[i * 2], &b, 2);
    } else {
      std::memcpy(&out[i * 4], &v, 4);
    }
  }
  return out;
}

std::string counts_diff(const model::FieldCounts& a, const model::FieldCounts& b) {
  for (int t = 0; t < model::kTables; ++t) {
    const auto& x = a[std::size_t(t)];
    const auto& y = b[std::size_t(t)];
    if (x.sym_min != y.sym_min || x.total != y.total || x.counts.size() != y.counts.size()) {
      return "table " + std::to_string(t) + ": sym_min " + std::to_string(x.sym_min) + "/" +
             std::to_string(y.sym_min) + " total " + std::to_string(x.total) + "/" + std::to_string(y.total) +
             " alphabet " + std::to_string(x.counts.size()) + "/" + std::to_string(y.counts.size());
    }
    // Tables wider than any coding table are never read beyond their size (DeviceSteps leaves them uncounted).
    if (x.counts.size() > (1u << model::kMaxProbBits)) continue;
    for (std::size_t i = 0; i < x.counts.size(); ++i) {
      if (x.counts[i] != y.counts[i]) {
        return "table " + std::to_string(t) + " value " + std::to_string(x.sym_min + std::int64_t(i)) + ": " +
               std::to_string(x.counts[i]) + "/" + std::to_string(y.counts[i]);
      }
    }
  }
  return {};
}

template <class T, class A>
std::string vec_diff(const char* what, const std::vector<T, A>& a, const std::vector<T, A>& b) {
  if (a.size() != b.size()) {
    return std::string(what) + ": size " + std::to_string(a.size()) + " (cpu) vs " + std::to_string(b.size());
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) {
      std::ostringstream o;
      o << what << ": first difference at " << i << " of " << a.size();
      if constexpr (std::is_arithmetic_v<T>) o << " (cpu " << +a[i] << ", device " << +b[i] << ")";
      return o.str();
    }
  }
  return {};
}

// Buffer by buffer; empty when equal.
std::string tensor_diff(const rans::EncodedTensor& a, const rans::EncodedTensor& b) {
  if (a.rows != b.rows || a.cols != b.cols || a.padded_cols != b.padded_cols || a.prob_bits != b.prob_bits ||
      a.tile_symbols != b.tile_symbols || a.dtype != b.dtype) {
    return "geometry: prob_bits " + std::to_string(a.prob_bits) + "/" + std::to_string(b.prob_bits) + " tile " +
           std::to_string(a.tile_symbols) + "/" + std::to_string(b.tile_symbols);
  }
  for (std::string d : {vec_diff("scales", a.scales, b.scales), vec_diff("freq_tables", a.freq_tables, b.freq_tables),
                        vec_diff("offsets", a.offsets, b.offsets), vec_diff("states", a.states, b.states),
                        vec_diff("payload", a.payload, b.payload)}) {
    if (!d.empty()) return d;
  }
  for (std::size_t t = 0; t < a.tables.size() && t < b.tables.size(); ++t) {
    if (std::memcmp(&a.tables[t], &b.tables[t], sizeof(rans::TableMeta)) != 0) return "tables[" + std::to_string(t) + "]";
  }
  if (a.tables.size() != b.tables.size()) return "tables: count";
  return {};
}

struct Case {
  std::uint32_t rows, cols;
  DType dtype;
  double bpp;
  Kind kind;
};

std::string name_of(const Case& c) {
  std::ostringstream o;
  o << c.rows << "x" << c.cols << " " << dtype_name(c.dtype) << " @" << c.bpp << " kind " << int(c.kind);
  return o.str();
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (double bpp : {2.0, 4.0, 8.0}) {
    for (DType d : {DType::kBF16, DType::kF16, DType::kF32}) {
      out.push_back({1, 8, d, bpp, Kind::kGaussian});
      out.push_back({3, 5, d, bpp, Kind::kGaussian});
      out.push_back({1000, 1003, d, bpp, Kind::kGaussian});
      out.push_back({257, 640, d, bpp, Kind::kHeavyTail});
      out.push_back({300, 96, d, bpp, Kind::kZeroRows});
    }
    out.push_back({64, 64, DType::kBF16, bpp, Kind::kAllZero});
    out.push_back({4096, 4096, DType::kBF16, bpp, Kind::kGaussian});
  }
  out.push_back({4096, 4096, DType::kF32, 4.0, Kind::kGaussian});
  out.push_back({10240, 3840, DType::kBF16, 4.0, Kind::kGaussian});
  return out;
}

class DeviceEncode : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::encoder_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

// The same sequence of steps on the CPU and on the device, each result compared: what a whole encode does, at the
// scales the CPU's own search visits.
TEST_F(DeviceEncode, StepsMatchTheCpuSteps) {
  auto dev = cuda::DeviceSteps::create(0);
  ASSERT_TRUE(dev) << dev.error().message;
  for (const Case& c : cases()) {
    if (std::uint64_t(c.rows) * c.cols > (1u << 24)) continue;  // the whole encodes below cover the largest
    SCOPED_TRACE(name_of(c));
    const auto w = make_tensor(c.rows, c.cols, c.dtype, c.kind, c.rows * 7919ull + c.cols);
    auto cpu = rate::make_cpu_steps(threads());
    const std::uint32_t padded = (c.cols + 7) / 8 * 8;
    const auto sample = rate::sample_rows(c.rows, padded, 4096);  // a real subset for the larger shapes
    auto sa0 = cpu->load(w, c.rows, c.cols, c.dtype, sample);
    auto sb0 = (*dev)->load(w, c.rows, c.cols, c.dtype, sample);
    ASSERT_TRUE(sa0 && sb0);
    ASSERT_EQ(sa0->finite, sb0->finite) << "step: the sample's statistics (finite)";
    ASSERT_EQ(sa0->max_abs, sb0->max_abs) << "step: the sample's statistics (max |x|)";
    // The sample's steps before the whole source's statistics, as the search runs them (the device may still be
    // copying the rest of the tensor).
    ASSERT_EQ(counts_diff(cpu->sample_counts(0.7f), (*dev)->sample_counts(0.7f)), "") << "step: early sample counts";
    auto a = cpu->source_stats();
    auto b = (*dev)->source_stats();
    ASSERT_TRUE(a && b);
    ASSERT_EQ(vec_diff("row rms", a->rms, b->rms), "") << "step: row statistics";
    ASSERT_EQ(a->max_abs, b->max_abs) << "step: row statistics (max |x|)";
    ASSERT_EQ(a->bad_row, b->bad_row) << "step: row statistics (non-finite)";
    for (float s : {0.05f, 0.3f, 1.0f, 2.5f}) {
      SCOPED_TRACE("scale " + std::to_string(s));
      ASSERT_EQ(counts_diff(cpu->sample_counts(s), (*dev)->sample_counts(s)), "") << "step: sample counts";
      ASSERT_TRUE((*dev)->sticky());
      const int pb = model::initial_prob_bits(c.bpp);
      const std::uint32_t tile = model::default_tile_symbols(c.bpp);
      auto sa = cpu->sample_code(s, c.cols, pb, tile);
      auto sb = (*dev)->sample_code(s, c.cols, pb, tile);
      ASSERT_EQ(bool(sa), bool(sb)) << "step: sample coding";
      if (sa) {
        ASSERT_EQ(counts_diff(sa->counts, sb->counts), "") << "step: sample coding (counts)";
        ASSERT_EQ(tensor_diff(sa->coded, sb->coded), "") << "step: sample coding (rANS)";
      }
      ASSERT_TRUE(cpu->quantize(s) && (*dev)->quantize(s));
      const lattice::QuantizedFields qd = static_cast<cuda::DeviceSteps&>(**dev).download_fields();
      ASSERT_EQ(vec_diff("coset", cpu->host()->q->coset, qd.coset), "") << "step: quantize (E8 nearest point)";
      ASSERT_EQ(vec_diff("fields", cpu->host()->q->fields, qd.fields), "") << "step: quantize (E8 fields)";
      const model::FieldCounts ca = cpu->counts(), cb = (*dev)->counts();
      ASSERT_EQ(counts_diff(ca, cb), "") << "step: count_fields";
      std::vector<float> sc_a, sc_b;
      std::vector<double> sse_a, sse_b;
      ASSERT_TRUE(cpu->refit(s, sc_a, &sse_a) && (*dev)->refit(s, sc_b, &sse_b));
      ASSERT_EQ(vec_diff("refit scales", sc_a, sc_b), "") << "step: refit_rows";
      ASSERT_EQ(vec_diff("refit row_sse", sse_a, sse_b), "") << "step: refit_rows (row sse)";
      if (model::max_alphabet(ca) <= (1u << pb)) {
        rans::EncodeGeometry g{c.rows, c.cols, std::uint32_t(pb), tile, c.dtype};
        auto ea = cpu->code(sc_a, g);
        auto eb = (*dev)->code(sc_b, g);
        ASSERT_TRUE(ea && eb);
        ASSERT_EQ(tensor_diff(*ea, *eb), "") << "step: tiled rANS (encode_fields)";
      }
    }
  }
}

TEST_F(DeviceEncode, StreamsAreTheCpuEncodersByteForByte) {
  auto dev = cuda::DeviceEncoder::create(0);
  ASSERT_TRUE(dev) << dev.error().message;
  for (const Case& c : cases()) {
    SCOPED_TRACE(name_of(c));
    const auto w = make_tensor(c.rows, c.cols, c.dtype, c.kind, c.rows * 7919ull + c.cols);
    rate::EncodeOptions o;
    o.target_bpp = c.bpp;
    o.threads = threads();
    rate::EncodeReport ra, rb;
    auto a = rate::encode(w, c.rows, c.cols, c.dtype, o, "t", &ra);
    std::optional<rate::ReconstructionError> err;
    auto b = (*dev)->encode(w, c.rows, c.cols, c.dtype, o, "t", &rb, &err);
    ASSERT_TRUE(a) << a.error().message;
    ASSERT_TRUE(b) << b.error().message;
    EXPECT_EQ(ra.scale, rb.scale);
    EXPECT_EQ(ra.prob_bits, rb.prob_bits);
    EXPECT_EQ(ra.coarsened, rb.coarsened);
    EXPECT_EQ(ra.estimated_bytes, rb.estimated_bytes);
    ASSERT_EQ(tensor_diff(*a, *b), "") << "whole encode";
    ASSERT_TRUE(err.has_value()) << "the device measures its reconstruction";
  }
}

// pack_tensor with the device encoder, in both stream profiles: the same form, profile and stream, the error
// measured on the device within 1e-9 of the host decode's (only the summation order differs; in the native profile
// both encoders code scales already on its grid, so the device measures the stored tensor).
TEST_F(DeviceEncode, PackTensorChoosesTheSameForm) {
  auto dev = cuda::DeviceEncoder::create(0);
  ASSERT_TRUE(dev) << dev.error().message;
  for (const rans::StreamProfile profile : {rans::StreamProfile::kReference, rans::StreamProfile::kNative}) {
    int native_tensors = 0;
    for (const Case& c : cases()) {
      if (std::uint64_t(c.rows) * c.cols > (1u << 24)) continue;
      SCOPED_TRACE(name_of(c) + " " + std::string(rans::profile_name(profile)));
      const auto w = make_tensor(c.rows, c.cols, c.dtype, c.kind, c.rows * 131ull + c.cols);
      rate::EncodeOptions o;
      o.target_bpp = c.bpp;
      o.threads = threads();
      rans::EncodingInfo info;
      info.target_bpp = c.bpp;
      info.profile = profile;
      auto a = rate::pack_tensor(w, c.rows, c.cols, c.dtype, o, rate::ChoicePolicy{}, info, "t");
      auto b = rate::pack_tensor(**dev, w, c.rows, c.cols, c.dtype, o, rate::ChoicePolicy{}, info, "t");
      ASSERT_TRUE(a && b);
      EXPECT_EQ(a->choice.form, b->choice.form) << a->choice.reason << " / " << b->choice.reason;
      EXPECT_EQ(a->stored_bytes, b->stored_bytes);
      EXPECT_NEAR(a->candidate.lattice_rel_l2, b->candidate.lattice_rel_l2,
                  1e-9 * std::max(1.0, std::fabs(a->candidate.lattice_rel_l2)));
      EXPECT_EQ(a->candidate.lattice_zero, b->candidate.lattice_zero);
      EXPECT_EQ(a->candidate.source_zero, b->candidate.source_zero);
      EXPECT_EQ(a->profile, b->profile);
      if (a->choice.form == rate::Form::kLatticeRans) {
        EXPECT_EQ(tensor_diff(a->lattice, b->lattice), "");
        native_tensors += b->profile == rans::StreamProfile::kNative;
      }
    }
    // Both encoders ignoring the profile would pass the comparisons above.
    if (profile == rans::StreamProfile::kNative) {
      EXPECT_GT(native_tensors, 0);
    }
  }
}

// The next tensor's prefetch (copied while the current one is encoded): taken when its bytes come, dropped when
// others come first, never changing a stream, whether the search's sample is the whole tensor or a few rows.
TEST_F(DeviceEncode, PrefetchedSourcesGiveTheSameStreams) {
  auto dev = cuda::DeviceEncoder::create(0);
  ASSERT_TRUE(dev);
  const std::vector<std::byte> a = make_tensor(512, 1000, DType::kBF16, Kind::kGaussian, 1);
  const std::vector<std::byte> b = make_tensor(300, 4096, DType::kBF16, Kind::kGaussian, 2);
  const std::vector<std::byte> c = make_tensor(700, 257, DType::kF16, Kind::kHeavyTail, 3);
  struct Step {
    const std::vector<std::byte>* w;
    std::uint32_t rows, cols;
    DType dtype;
    const std::vector<std::byte>* next;
  };
  // a (prefetching b), a again (b in flight), c (copied directly, b still in flight), b (taken), b again (copied
  // directly, prefetching c), c (taken).
  const Step steps[] = {{&a, 512, 1000, DType::kBF16, &b}, {&a, 512, 1000, DType::kBF16, &b},
                        {&c, 700, 257, DType::kF16, &b},   {&b, 300, 4096, DType::kBF16, nullptr},
                        {&b, 300, 4096, DType::kBF16, &c}, {&c, 700, 257, DType::kF16, nullptr}};
  // Each sample the whole tensor (the default budget), then a few rows (gathered from the host, or on the device
  // from a prefetched tensor).
  for (const std::uint64_t budget : {std::uint64_t{262144}, std::uint64_t{2000}}) {
    rate::EncodeOptions o;
    o.threads = threads();
    o.search_max_vectors = budget;
    for (const Step& st : steps) {
      (*dev)->prefetch_next(st.next ? std::span<const std::byte>(*st.next) : std::span<const std::byte>());
      auto want = rate::encode(*st.w, st.rows, st.cols, st.dtype, o, "t");
      auto got = (*dev)->encode(*st.w, st.rows, st.cols, st.dtype, o, "t", nullptr, nullptr);
      ASSERT_TRUE(want && got);
      ASSERT_EQ(tensor_diff(*want, *got), "") << st.rows << "x" << st.cols << " sample budget " << budget;
    }
  }
}

TEST_F(DeviceEncode, NonFiniteInputIsRefusedAsOnTheCpu) {
  auto dev = cuda::DeviceEncoder::create(0);
  ASSERT_TRUE(dev);
  auto w = make_tensor(20, 30, DType::kF32, Kind::kGaussian, 5);
  const float inf = INFINITY;
  std::memcpy(&w[(7 * 30 + 11) * 4], &inf, 4);
  std::memcpy(&w[(9 * 30 + 2) * 4], &inf, 4);
  rate::EncodeOptions o;
  auto a = rate::encode(w, 20, 30, DType::kF32, o, "w");
  std::optional<rate::ReconstructionError> err;
  auto b = (*dev)->encode(w, 20, 30, DType::kF32, o, "w", nullptr, &err);
  ASSERT_FALSE(a);
  ASSERT_FALSE(b);
  EXPECT_EQ(a.error().message, b.error().message);
  EXPECT_NE(b.error().message.find("row 7, column 11"), std::string::npos) << b.error().message;
}

// The ordered row passes (row statistics, refit sums) on shapes of both their forms (columns a multiple of 128:
// streamed through shared memory; others: plain) with edge values: zeros of both signs, subnormals, the largest
// finite values, every row length's last column, a last block of rows cut short; then a non-finite value at the
// first and last column of a row, at either side of a 64-column slice and in the last row.
TEST_F(DeviceEncode, RowPassesMatchTheCpuOnEdgeValues) {
  auto dev = cuda::DeviceSteps::create(0);
  ASSERT_TRUE(dev) << dev.error().message;
  struct Shape {
    std::uint32_t rows, cols;
  };
  for (const Shape sh : {Shape{33, 128}, Shape{65, 256}, Shape{7, 384}, Shape{40, 1000}, Shape{3, 13}}) {
    for (const DType d : {DType::kBF16, DType::kF16, DType::kF32}) {
      SCOPED_TRACE(std::to_string(sh.rows) + "x" + std::to_string(sh.cols) + " " + std::string(dtype_name(d)));
      const std::size_t es = std::size_t(dtype_bits(d) / 8);
      auto w = make_tensor(sh.rows, sh.cols, d, Kind::kGaussian, sh.rows + 31ull * sh.cols);
      // Edge values by their bits: -0, the smallest subnormal, the largest finite value, 0.
      auto put = [&](std::uint32_t r, std::uint32_t c, std::uint32_t f32_bits, std::uint16_t half_bits) {
        if (es == 4) {
          std::memcpy(&w[(std::size_t(r) * sh.cols + c) * 4], &f32_bits, 4);
        } else {
          std::memcpy(&w[(std::size_t(r) * sh.cols + c) * 2], &half_bits, 2);
        }
      };
      const bool bf = d == DType::kBF16;
      for (std::uint32_t r = 0; r < sh.rows; r += 2) {
        put(r, r % sh.cols, 0x80000000u, 0x8000);
        put(r, (r * 7 + 1) % sh.cols, 0x00000001u, 0x0001);
        put(r, sh.cols - 1, 0x7f7fffffu, bf ? 0x7f7f : 0x7bff);
      }
      for (std::uint32_t c = 0; c < sh.cols; ++c) put(sh.rows - 1, c, 0, 0);  // a zero row, the last
      const auto sample = rate::sample_rows(sh.rows, (sh.cols + 7) / 8 * 8, 262144);
      auto cpu = rate::make_cpu_steps(threads());
      ASSERT_TRUE(cpu->load(w, sh.rows, sh.cols, d, sample) && (*dev)->load(w, sh.rows, sh.cols, d, sample));
      auto a = cpu->source_stats();
      auto b = (*dev)->source_stats();
      ASSERT_TRUE(a && b);
      ASSERT_EQ(vec_diff("row rms", a->rms, b->rms), "");
      ASSERT_EQ(a->max_abs, b->max_abs);
      ASSERT_EQ(a->bad_row, b->bad_row);
      for (const float scale : {0.02f, 0.4f}) {
        ASSERT_TRUE(cpu->quantize(scale) && (*dev)->quantize(scale));
        std::vector<float> sc_a, sc_b;
        std::vector<double> sse_a, sse_b;
        ASSERT_TRUE(cpu->refit(scale, sc_a, &sse_a) && (*dev)->refit(scale, sc_b, &sse_b));
        ASSERT_EQ(vec_diff("refit scales", sc_a, sc_b), "") << "scale " << scale;
        ASSERT_EQ(vec_diff("refit row_sse", sse_a, sse_b), "") << "scale " << scale;
      }
      struct Spot {
        std::uint32_t r, c;
      };
      const std::uint32_t mid = sh.rows / 2;
      const auto clean = w;
      for (const Spot at : {Spot{0, 0}, Spot{mid, sh.cols - 1}, Spot{mid, std::min(63u, sh.cols - 1)},
                            Spot{mid, std::min(64u, sh.cols - 1)}, Spot{sh.rows - 1, sh.cols / 2}}) {
        for (const bool nan : {false, true}) {
          w = clean;
          if (es == 4) {
            put(at.r, at.c, nan ? 0x7fc00000u : 0xff800000u, 0);  // NaN, -inf
          } else {
            put(at.r, at.c, 0, bf ? (nan ? 0x7fc0 : 0xff80) : (nan ? 0x7e00 : 0xfc00));
          }
          ASSERT_TRUE(cpu->load(w, sh.rows, sh.cols, d, sample) && (*dev)->load(w, sh.rows, sh.cols, d, sample));
          auto x = cpu->source_stats();
          auto y = (*dev)->source_stats();
          ASSERT_TRUE(x && y);
          EXPECT_EQ(x->bad_row, std::int64_t(at.r));
          EXPECT_EQ(x->bad_col, std::int64_t(at.c));
          EXPECT_EQ(y->bad_row, x->bad_row) << "at " << at.r << "," << at.c;
          EXPECT_EQ(y->bad_col, x->bad_col) << "at " << at.r << "," << at.c;
          ASSERT_EQ(vec_diff("row rms", x->rms, y->rms), "");
        }
      }
    }
  }
}

// A search sample of a few rows (search_max_vectors small), so that the whole tensor arrives after the sample:
// a non-finite value inside the sample's rows and outside them, and a sample of zero rows in a tensor that is not
// all zero (the search then runs after the whole tensor's statistics), each as the CPU encoder does.
TEST_F(DeviceEncode, SampleRowsAheadOfTheTensorChangeNothing) {
  auto dev = cuda::DeviceEncoder::create(0);
  ASSERT_TRUE(dev);
  constexpr std::uint32_t kRows = 301, kCols = 203;  // 26 vectors a row
  rate::EncodeOptions o;
  o.threads = threads();
  o.search_max_vectors = 26 * 12;
  const auto sample = rate::sample_rows(kRows, (kCols + 7) / 8 * 8, o.search_max_vectors);
  ASSERT_EQ(sample.size(), 12u);
  std::uint32_t outside = 0;
  while (std::find(sample.begin(), sample.end(), outside) != sample.end()) ++outside;
  const float nan = NAN;
  for (DType d : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(d));
    for (const std::uint32_t bad_row : {sample[3], outside}) {
      SCOPED_TRACE("non-finite at row " + std::to_string(bad_row));
      auto w = make_tensor(kRows, kCols, DType::kF32, Kind::kGaussian, 11);
      std::memcpy(&w[(std::size_t(bad_row) * kCols + 17) * 4], &nan, 4);
      if (d == DType::kBF16) {
        std::vector<std::byte> h(std::size_t(kRows) * kCols * 2);
        for (std::size_t i = 0; i < std::size_t(kRows) * kCols; ++i) {
          float v;
          std::memcpy(&v, &w[i * 4], 4);
          const std::uint16_t b = bf16_from_float(v);
          std::memcpy(&h[i * 2], &b, 2);
        }
        w = std::move(h);
      }
      auto a = rate::encode(w, kRows, kCols, d, o, "w");
      auto b = (*dev)->encode(w, kRows, kCols, d, o, "w", nullptr, nullptr);
      ASSERT_FALSE(a);
      ASSERT_FALSE(b);
      EXPECT_EQ(a.error().message, b.error().message);
      EXPECT_NE(b.error().message.find("row " + std::to_string(bad_row) + ", column 17"), std::string::npos)
          << b.error().message;
    }
    auto w = make_tensor(kRows, kCols, d, Kind::kHeavyTail, 12);
    const std::size_t es = std::size_t(dtype_bits(d) / 8);
    for (const std::uint32_t r : sample) std::memset(&w[std::size_t(r) * kCols * es], 0, kCols * es);
    rate::EncodeReport ra, rb;
    auto a = rate::encode(w, kRows, kCols, d, o, "w", &ra);
    auto b = (*dev)->encode(w, kRows, kCols, d, o, "w", &rb, nullptr);
    ASSERT_TRUE(a && b);
    EXPECT_EQ(ra.scale, rb.scale);
    ASSERT_EQ(tensor_diff(*a, *b), "") << "a sample of zero rows";
  }
}

}  // namespace
}  // namespace epk
