// rate::choose_form and pack_tensor: no tensor of any shape comes back worse than the error ceiling or the rate the
// user asked for would allow; what lattice-rans cannot serve is stored raw (exact).
#include "codec/rate/choose.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "codec/common/half.h"

namespace epk::rate {
namespace {

Candidate good(double target) {
  Candidate c;
  c.target_bpp = target;
  c.lattice_bpp = target;
  c.lattice_rel_l2 = 1.2 * std::exp2(-target);
  c.raw_bpp = 16.1;
  return c;
}

TEST(ChooseForm, DefaultCeilingFollowsTheRateBetweenFloorAndCap) {
  EXPECT_DOUBLE_EQ(default_max_rel_l2(0.5), 0.9);
  EXPECT_DOUBLE_EQ(default_max_rel_l2(2.0), 0.75);
  EXPECT_DOUBLE_EQ(default_max_rel_l2(4.0), 0.1875);
  EXPECT_DOUBLE_EQ(default_max_rel_l2(8.0), 3.0 / 256.0);
  EXPECT_DOUBLE_EQ(default_max_rel_l2(11.0), 0.01);
}

TEST(ChooseForm, KeepsANormalLayerAtEveryRate) {
  for (double r : {1.0, 2.0, 3.0, 4.0, 6.0, 8.0}) {
    const Choice ch = choose_form(good(r), {});
    EXPECT_EQ(ch.form, Form::kLatticeRans) << r << ": " << ch.reason;
    EXPECT_TRUE(ch.reason.empty());
    EXPECT_DOUBLE_EQ(ch.max_rel_l2, default_max_rel_l2(r));
  }
}

TEST(ChooseForm, EachRuleSendsTheTensorRaw) {
  Candidate c = good(4);
  c.lattice_zero = true;
  EXPECT_EQ(choose_form(c, {}).form, Form::kRaw);
  c.source_zero = true;  // an all-zero source reconstructed as zeros is exact
  c.lattice_rel_l2 = 0;
  EXPECT_EQ(choose_form(c, {}).form, Form::kLatticeRans);

  c = good(4);
  c.lattice_rel_l2 = 0.39;  // 64x64 at 4 bpp before this rule
  Choice ch = choose_form(c, {});
  EXPECT_EQ(ch.form, Form::kRaw);
  EXPECT_NE(ch.reason.find("39.00%"), std::string::npos) << ch.reason;
  EXPECT_NE(ch.reason.find("ceiling 18.75%"), std::string::npos) << ch.reason;
  ChoicePolicy loose;
  loose.max_rel_l2 = 0.4;  // --max-error 0.4 accepts it
  EXPECT_EQ(choose_form(c, loose).form, Form::kLatticeRans);

  c = good(4);
  c.lattice_rel_l2 = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(choose_form(c, {}).form, Form::kRaw);

  c = good(4);
  c.lattice_bpp = 6.5;  // over 1.5x the target
  ch = choose_form(c, {});
  EXPECT_EQ(ch.form, Form::kRaw);
  EXPECT_NE(ch.reason.find("6.500 bpp"), std::string::npos) << ch.reason;

  c = good(8);
  c.raw_bpp = 8.0;  // an 8-bit source: lattice at 8 bpp is no smaller than raw
  c.lattice_bpp = 8.01;
  EXPECT_EQ(choose_form(c, {}).form, Form::kRaw);
}

// A calibrated candidate is judged by its H-weighted error: a plain error past the ceiling keeps it, an H-weighted
// error past the ceiling (or NaN) sends it raw, named as such.
TEST(ChooseForm, TheCeilingJudgesACalibratedWeightByItsWeightedError) {
  Candidate c = good(4);
  c.lattice_rel_l2 = 0.2258;  // the plain error feedback rounding left on an anisotropic layer
  c.lattice_h_rel = 0.07;
  EXPECT_EQ(choose_form(c, {}).form, Form::kLatticeRans);
  c.lattice_h_rel = 0.19;
  Choice ch = choose_form(c, {});
  EXPECT_EQ(ch.form, Form::kRaw);
  EXPECT_NE(ch.reason.find("H-weighted error 19.00%"), std::string::npos) << ch.reason;
  c.lattice_h_rel = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(choose_form(c, {}).form, Form::kRaw);
  c.lattice_h_rel = 0.07;
  c.lattice_zero = true;  // the other rules still apply
  EXPECT_EQ(choose_form(c, {}).form, Form::kRaw);
}

// Gaussian bf16 weights (sigma 0.02) of rows x cols, seeded by the shape.
std::vector<std::uint16_t> gaussian(std::uint32_t rows, std::uint32_t cols) {
  std::mt19937 rng(rows * 7919u + cols);
  std::normal_distribution<float> g(0.0f, 0.02f);
  std::vector<std::uint16_t> w(std::size_t(rows) * cols);
  for (auto& v : w) v = f32_to_bf16(g(rng));
  return w;
}

struct Shape {
  std::uint32_t rows, cols;
};

class PackShapes : public ::testing::TestWithParam<std::tuple<Shape, double>> {};

TEST_P(PackShapes, NoTensorComesBackWorseThanTheCeilingOrTheRateAllows) {
  const auto [shape, bpp] = GetParam();
  const auto w = gaussian(shape.rows, shape.cols);
  EncodeOptions o;
  o.target_bpp = bpp;
  rans::EncodingInfo info;
  info.target_bpp = bpp;
  auto p = pack_tensor(std::as_bytes(std::span(w)), shape.rows, shape.cols, DType::kBF16, o, {}, info, "w");
  ASSERT_TRUE(p) << p.error().to_string();
  const double ceiling = default_max_rel_l2(bpp);
  const double raw_bpp = 8.0 * double(raw_stored_bytes("w", shape.rows, shape.cols, DType::kBF16)) /
                         (double(shape.rows) * shape.cols);
  EXPECT_DOUBLE_EQ(p->candidate.raw_bpp, raw_bpp);
  EXPECT_LE(p->rel_l2, ceiling) << p->choice.reason;
  // The stored rate meets the request, or the tensor is raw (exact): never more than raw, never a lossy form above
  // 1.5x the target.
  if (p->choice.form == Form::kRaw) {
    EXPECT_EQ(p->rel_l2, 0.0);
    EXPECT_DOUBLE_EQ(p->stored_bpp, raw_bpp);
    EXPECT_FALSE(p->choice.reason.empty());
  } else {
    EXPECT_LT(p->stored_bpp, raw_bpp);
    EXPECT_LE(p->stored_bpp, kMaxRateRatio * bpp);
    EXPECT_GT(p->rel_l2, 0.0);
    EXPECT_DOUBLE_EQ(p->stored_bpp, p->candidate.lattice_bpp);
  }
  // Large layers stay lattice-rans at every rate (the rule must not throw away what the codec does well).
  if (std::uint64_t(shape.rows) * shape.cols >= 256 * 256) {
    EXPECT_EQ(p->choice.form, Form::kLatticeRans) << p->choice.reason;
  }
}

// An encoder that counts its calls.
class CountingEncoder final : public TensorEncoder {
 public:
  Result<rans::EncodedTensor> encode(std::span<const std::byte> weights, std::uint32_t rows, std::uint32_t cols,
                                     DType dtype, const EncodeOptions& options, std::string_view name,
                                     EncodeReport* report, std::optional<ReconstructionError>* error) override {
    ++calls;
    return cpu_.encode(weights, rows, cols, dtype, options, name, report, error);
  }
  int calls = 0;

 private:
  CpuEncoder cpu_;
};

// The encoder's calibration counts the .epk form (buffers plus index entry), so one encode meets the target in that
// count, for tensors the search samples whole (the small ones, where the index entry weighs most) and in part.
TEST(PackTensor, OneEncodeMeetsTheTargetAsTheContainerCountsIt) {
  struct Case {
    std::uint32_t rows, cols;
    std::uint64_t search_max_vectors = 262144;
  };
  // 65536 vectors: a sample of 512 of the 1024 rows.
  for (const Case c : {Case{50, 520}, Case{200, 520}, Case{256, 256}, Case{96, 1000}, Case{1024, 1024, 65536}}) {
    // Gaussian rows with three heavy columns, as attention projections have.
    std::mt19937 rng(c.rows * 31u + c.cols);
    std::normal_distribution<float> g(0.0f, 0.02f);
    std::vector<std::uint16_t> w(std::size_t(c.rows) * c.cols);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = f32_to_bf16(g(rng) * (i % c.cols < 3 ? 20.0f : 1.0f));
    for (double bpp : {2.0, 4.0, 6.0, 8.0}) {
      double error_of[2] = {0, 0};
      for (rans::StreamProfile profile : {rans::StreamProfile::kReference, rans::StreamProfile::kNative}) {
        EncodeOptions o;
        o.target_bpp = bpp;
        o.threads = 2;
        o.search_max_vectors = c.search_max_vectors;
        rans::EncodingInfo info;
        info.target_bpp = bpp;
        info.profile = profile;
        CountingEncoder enc;
        ChoicePolicy policy;
        policy.max_rel_l2 = 1.0;  // the rate is under test, not the ceiling
        auto p = pack_tensor(enc, std::as_bytes(std::span(w)), c.rows, c.cols, DType::kBF16, o, policy, info,
                             "layer.w");
        ASSERT_TRUE(p) << p.error().to_string();
        const std::string what = std::to_string(c.rows) + "x" + std::to_string(c.cols) + " at " +
                                 std::to_string(bpp) + ", " + std::string(rans::profile_name(profile));
        EXPECT_EQ(enc.calls, 1);
        ASSERT_EQ(p->choice.form, Form::kLatticeRans) << what << ": " << p->choice.reason;
        EXPECT_EQ(p->profile, profile) << p->profile_note;
        // stored_bpp is the container's count (buffers plus the index entry of the params written).
        rans::EncodingInfo written = info;
        written.scale = p->report.scale;
        written.coarsened = p->report.coarsened;
        auto form = rans::to_container_as(p->lattice, "layer.w", written);
        ASSERT_TRUE(form) << form.error().to_string();
        std::uint64_t bytes = rans::index_entry_bytes(form->form.spec, form->form.buffers);
        for (const auto& b : form->form.buffers) bytes += b.bytes.size();
        EXPECT_EQ(p->stored_bytes, bytes) << what;
        EXPECT_NEAR(p->stored_bpp / bpp, 1.0, 0.005) << what;
        error_of[int(profile)] = p->rel_l2;
      }
      // The native profile's lighter metadata buys less error at the same stored rate.
      EXPECT_LT(error_of[1], error_of[0]) << c.rows << "x" << c.cols << " at " << bpp;
    }
  }
}

// A tensor whose row scales span more than the native profile's fp16 scales hold keeps the reference profile, and
// the pack says why.
TEST(PackTensor, ScalesBeyondFp16KeepTheReferenceProfile) {
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const std::uint32_t rows = 16, cols = 256;
  std::vector<float> w(std::size_t(rows) * cols);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = g(rng) * (i / cols == 3 ? 1e-12f : 1.0f);
  EncodeOptions o;
  o.target_bpp = 4.0;
  rans::EncodingInfo info;
  info.target_bpp = 4.0;
  info.profile = rans::StreamProfile::kNative;
  ChoicePolicy policy;
  policy.max_rel_l2 = 1.0;
  auto p = pack_tensor(std::as_bytes(std::span(w)), rows, cols, DType::kF32, o, policy, info, "w");
  ASSERT_TRUE(p) << p.error().to_string();
  ASSERT_EQ(p->choice.form, Form::kLatticeRans) << p->choice.reason;
  EXPECT_EQ(p->profile, rans::StreamProfile::kReference);
  EXPECT_NE(p->profile_note.find("row 3"), std::string::npos) << p->profile_note;
}

INSTANTIATE_TEST_SUITE_P(
    Gaussian, PackShapes,
    ::testing::Combine(::testing::Values(Shape{1, 8}, Shape{1, 64}, Shape{8, 8}, Shape{2, 384}, Shape{16, 16},
                                         Shape{32, 64}, Shape{16, 256}, Shape{64, 64}, Shape{128, 128},
                                         Shape{256, 256}),
                       ::testing::Values(2.0, 4.0, 8.0)),
    [](const auto& param_info) {
      const Shape s = std::get<0>(param_info.param);
      return std::to_string(s.rows) + "x" + std::to_string(s.cols) + "_" +
             std::to_string(int(std::get<1>(param_info.param))) + "bpp";
    });

}  // namespace
}  // namespace epk::rate
