#include "codec/rate/compress_plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

namespace epk::rate {
namespace {

// Tensor views over bytes the fixture owns.
class Tensors {
 public:
  // F32 with every element `value`: energy value^2 per weight.
  void add(std::string name, std::vector<std::uint64_t> shape, float value = 0.5f, DType dtype = DType::kF32) {
    std::uint64_t n = 1;
    for (auto d : shape) n *= d;
    auto& bytes = storage_.emplace_back(n * std::uint64_t(dtype_bits(dtype)) / 8, std::uint8_t{0});
    if (dtype == DType::kF32)
      for (std::uint64_t i = 0; i < n; ++i) std::memcpy(&bytes[i * 4], &value, 4);
    views_.push_back({std::move(name), dtype, std::move(shape), bytes});
  }
  const std::vector<safetensors::TensorView>& views() const { return views_; }

 private:
  std::deque<std::vector<std::uint8_t>> storage_;
  std::vector<safetensors::TensorView> views_;
};

CompressSettings with_rules(std::optional<double> bpp, std::optional<double> budget,
                            const std::vector<std::string>& rules) {
  CompressSettings s;
  s.bpp = bpp;
  s.budget_bpp = budget;
  for (const auto& r : rules) {
    auto parsed = parse_rate_rule(r);
    EXPECT_TRUE(parsed.has_value()) << r;
    if (parsed) s.rules.push_back(*parsed);
  }
  return s;
}

// Bytes that store n weights at bpp bits each.
std::uint64_t bytes_at(double bpp, std::uint64_t n) { return std::uint64_t(std::llround(bpp * double(n) / 8.0)); }

TEST(CompressPlan, ParseRuleSplitsAtTheLastEqualsSign) {
  auto r = parse_rate_rule("a=b*=raw");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->pattern, "a=b*");
  EXPECT_FALSE(r->bpp.has_value());
  r = parse_rate_rule("*proj*=5.5");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->pattern, "*proj*");
  EXPECT_EQ(r->bpp, 5.5);
  for (const auto& [text, says] : std::vector<std::pair<std::string, std::string>>{
           {"nothing", "expected PATTERN=RATE"},
           {"=4", "expected PATTERN=RATE"},
           {"*=", "expected PATTERN=RATE"},
           {"*=fast", "rate 'fast' is not raw or a number in [0.5, 16]"},
           {"*=0.4", "rate '0.4'"},
           {"*=16.5", "rate '16.5'"},
           {"*=4x", "rate '4x'"}}) {
    r = parse_rate_rule(text);
    ASSERT_FALSE(r.has_value()) << text;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument) << text;
    EXPECT_NE(r.error().message.find("--rule '" + text + "'"), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find(says), std::string::npos) << r.error().message;
  }
}

TEST(CompressPlan, RatesAreCheckedNamingTheFlag) {
  EXPECT_NE(check_rates({}).error().message.find("give a rate"), std::string::npos);
  EXPECT_NE(check_rates(with_rules(0.4, {}, {})).error().message.find("--bpp 0.400000 is outside [0.5, 16]"),
            std::string::npos);
  EXPECT_NE(check_rates(with_rules(NAN, {}, {})).error().message.find("--bpp"), std::string::npos);
  EXPECT_NE(check_rates(with_rules({}, 0.9, {})).error().message.find("--budget-bpp 0.900000 is outside [1, 8]"),
            std::string::npos);
  EXPECT_NE(check_rates(with_rules({}, 8.5, {})).error().message.find("--budget-bpp"), std::string::npos);
  EXPECT_TRUE(check_rates(with_rules(0.5, {}, {})).has_value());
  EXPECT_TRUE(check_rates(with_rules(16.0, 1.0, {})).has_value());
  EXPECT_TRUE(check_rates(with_rules({}, 8.0, {})).has_value());
  // create checks them too.
  Tensors t;
  t.add("w", {4, 8});
  EXPECT_FALSE(CompressPlan::create(t.views(), with_rules({}, 9.0, {})).has_value());
}

TEST(CompressPlan, RulesFirstMatchWins) {
  Tensors t;
  t.add("l.q_proj.weight", {16, 32});
  t.add("l.down_proj.weight", {16, 32});
  t.add("l.down.weight", {16, 32});
  t.add("l.other.weight", {16, 32});
  auto p = CompressPlan::create(t.views(), with_rules(3.0, {}, {"*q_proj*=6", "*proj*=5", "*down*=raw"}));
  ASSERT_TRUE(p.has_value()) << p.error().message;
  // q_proj matches *q_proj* and *proj*: the first wins.
  EXPECT_TRUE(p->plan(0).encode);
  EXPECT_TRUE(p->plan(0).fixed);
  EXPECT_EQ(p->plan(0).target, 6.0);
  // down_proj matches *proj* before *down*.
  EXPECT_TRUE(p->plan(1).encode);
  EXPECT_EQ(p->plan(1).target, 5.0);
  EXPECT_FALSE(p->plan(2).encode);
  EXPECT_TRUE(p->plan(2).fixed);
  EXPECT_EQ(p->plan(2).why, "rule *down*");
  EXPECT_TRUE(p->plan(3).encode);
  EXPECT_FALSE(p->plan(3).fixed);
  EXPECT_EQ(p->plan(3).target, 3.0);
  for (std::size_t i : {0, 1, 3}) EXPECT_EQ(*p->target(i), p->plan(i).target) << i;
  // The other order: *down*=raw first now keeps down_proj raw.
  p = CompressPlan::create(t.views(), with_rules(3.0, {}, {"*down*=raw", "*proj*=5"}));
  ASSERT_TRUE(p.has_value());
  EXPECT_FALSE(p->plan(1).encode);
  EXPECT_EQ(p->plan(1).why, "rule *down*");
  EXPECT_EQ(p->plan(0).target, 5.0);
}

TEST(CompressPlan, ANumericRuleOnATensorThatCannotBeEncodedIsAnErrorNamingIt) {
  Tensors t;
  t.add("model.layers.0.mlp.up_proj.weight", {16, 32});
  t.add("model.norm.weight", {200}, 1.0f, DType::kBF16);
  auto p = CompressPlan::create(t.views(), with_rules(4.0, {}, {"*norm*=4"}));
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(p.error().message,
            "--rule *norm*: tensor 'model.norm.weight' (BF16 [200]) cannot be encoded: only 2-D F32, BF16, F16, F8 "
            "and I8 weights can");
  // raw is always allowed.
  p = CompressPlan::create(t.views(), with_rules(4.0, {}, {"*norm*=raw"}));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->plan(1).why, "rule *norm*");
  // A 2-D tensor of a dtype the encoder does not take.
  Tensors u;
  u.add("ids.weight", {4, 8}, 0.0f, DType::kI32);
  p = CompressPlan::create(u.views(), with_rules(4.0, {}, {"ids*=4"}));
  ASSERT_FALSE(p.has_value());
  EXPECT_NE(p.error().message.find("tensor 'ids.weight' (I32 [4, 8]) cannot be encoded"), std::string::npos)
      << p.error().message;
}

TEST(CompressPlan, TensorsWithoutARuleSayWhyTheyStayRaw) {
  Tensors t;
  t.add("bias", {32});
  t.add("conv.weight", {4, 4, 3});
  t.add("ids.weight", {4, 8}, 0.0f, DType::kI32);
  t.add("scalar", {});
  t.add("w.weight", {4, 8});
  auto p = CompressPlan::create(t.views(), with_rules(4.0, {}, {}));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->plan(0).why, "1-D");
  EXPECT_EQ(p->plan(1).why, "not 2-D");
  EXPECT_EQ(p->plan(2).why, "dtype I32");
  EXPECT_EQ(p->plan(3).why, "not 2-D");
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_FALSE(p->plan(i).encode) << i;
    EXPECT_FALSE(p->plan(i).fixed) << i;
  }
  EXPECT_TRUE(p->plan(4).encode);
  EXPECT_EQ(p->plan(4).target, 4.0);
}

TEST(CompressPlan, EmbeddingsStayRawUnlessAsked) {
  Tensors t;
  for (const char* name : {"model.embed_tokens.weight", "transformer.wte.weight", "transformer.wpe.weight",
                           "tok_embeddings.weight", "model.layers.0.mlp.up_proj.weight"})
    t.add(name, {16, 32});
  auto p = CompressPlan::create(t.views(), with_rules(4.0, {}, {}));
  ASSERT_TRUE(p.has_value());
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_FALSE(p->plan(i).encode) << t.views()[i].name;
    EXPECT_EQ(p->plan(i).why, "embedding") << t.views()[i].name;
  }
  EXPECT_TRUE(p->plan(4).encode);
  auto s = with_rules(4.0, {}, {});
  s.include_embeddings = true;
  p = CompressPlan::create(t.views(), s);
  ASSERT_TRUE(p.has_value());
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_TRUE(p->plan(i).encode) << t.views()[i].name;
    EXPECT_EQ(p->plan(i).target, 4.0);
  }
  // A rule overrides the embedding default.
  p = CompressPlan::create(t.views(), with_rules(4.0, {}, {"*embed*=6"}));
  ASSERT_TRUE(p.has_value());
  EXPECT_TRUE(p->plan(0).encode);
  EXPECT_EQ(p->plan(0).target, 6.0);
  EXPECT_FALSE(p->plan(1).encode);
}

TEST(CompressPlan, BudgetSpendsRuleFixedRatesFirst) {
  // q: 512 weights fixed at 6; a, b: 512 free weights each, equal energy; a raw 1-D tensor outside the budget.
  Tensors t;
  t.add("q.weight", {16, 32});
  t.add("norm", {64});
  t.add("a.weight", {16, 32});
  t.add("b.weight", {16, 32});
  auto p = CompressPlan::create(t.views(), with_rules({}, 4.0, {"q*=6"}));
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_EQ(*p->target(0), 6.0);
  // (4 * 1536 - 6 * 512) / 1024 = 3 for each free tensor.
  EXPECT_NEAR(*p->target(2), 3.0, 1e-9);
  // q stored at its rate, a at its own: b keeps 3.
  p->record_stored(0, bytes_at(6.0, 512));
  p->record_stored(1, 1000);  // planned raw: not counted
  EXPECT_NEAR(*p->target(2), 3.0, 1e-9);
  p->record_stored(2, bytes_at(3.0, 512));
  EXPECT_NEAR(*p->target(3), 3.0, 1e-9);
  // A free tensor with twice the rms gets one bit more; the pair still spends what is left.
  Tensors u;
  u.add("q.weight", {16, 32});
  u.add("a.weight", {16, 32}, 0.5f);
  u.add("b.weight", {16, 32}, 1.0f);
  p = CompressPlan::create(u.views(), with_rules({}, 4.0, {"q*=6"}));
  ASSERT_TRUE(p.has_value());
  EXPECT_NEAR(*p->target(1), 2.5, 1e-9);
  p->record_stored(0, bytes_at(6.0, 512));
  p->record_stored(1, bytes_at(2.5, 512));
  EXPECT_NEAR(*p->target(2), 3.5, 1e-9);
}

TEST(CompressPlan, AFallbacksExtraBitsComeFromTheTensorsAfterIt) {
  Tensors t;
  for (const char* name : {"a.weight", "b.weight", "c.weight"}) t.add(name, {16, 32});
  auto p = CompressPlan::create(t.views(), with_rules({}, 4.0, {}));
  ASSERT_TRUE(p.has_value());
  EXPECT_NEAR(*p->target(0), 4.0, 1e-9);
  // a stored raw-ish at 6 bpp: b and c share the 12 - 6 bits per 512 left, 3 each.
  p->record_stored(0, bytes_at(6.0, 512));
  EXPECT_NEAR(*p->target(1), 3.0, 1e-9);
  p->record_stored(1, bytes_at(3.0, 512));
  EXPECT_NEAR(*p->target(2), 3.0, 1e-9);
  // A fallback that leaves less than the floor: the rest is clamped to 1 bpp.
  p = CompressPlan::create(t.views(), with_rules({}, 4.0, {}));
  ASSERT_TRUE(p.has_value());
  p->record_stored(0, bytes_at(32.0, 512));
  EXPECT_EQ(*p->target(1), kMinBudgetBpp);
  // A rule-fixed tensor's fallback counts at what it stored, not at its rule's rate.
  Tensors u;
  for (const char* name : {"q.weight", "a.weight", "b.weight"}) u.add(name, {16, 32});
  p = CompressPlan::create(u.views(), with_rules({}, 4.0, {"q*=5"}));
  ASSERT_TRUE(p.has_value());
  EXPECT_NEAR(*p->target(1), 3.5, 1e-9);
  p->record_stored(0, bytes_at(7.0, 512));
  EXPECT_NEAR(*p->target(1), 2.5, 1e-9);
}

TEST(CompressPlan, BudgetRefusesWhatRuleFixedRatesLeaveOutsideOneToEight) {
  Tensors t;
  t.add("q.weight", {16, 32});
  t.add("a.weight", {16, 32});
  // (1.2 * 1024 - 8 * 512) / 512 = -5.6 left.
  auto p = CompressPlan::create(t.views(), with_rules({}, 1.2, {"q*=8"}));
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(p.error().message,
            "--budget-bpp 1.200000: after the rule-fixed tensors, -5.600000 bpp are left for the others, outside "
            "[1, 8]");
  // (7.5 * 1024 - 1 * 512) / 512 = 14 left.
  p = CompressPlan::create(t.views(), with_rules({}, 7.5, {"q*=1"}));
  ASSERT_FALSE(p.has_value());
  EXPECT_NE(p.error().message.find("14.000000 bpp are left"), std::string::npos) << p.error().message;
  // Exactly the limits are allowed: (4.5 * 1024 - 8 * 512) / 512 = 1, (4.5 * 1024 - 1 * 512) / 512 = 8.
  EXPECT_TRUE(CompressPlan::create(t.views(), with_rules({}, 4.5, {"q*=8"})).has_value());
  EXPECT_TRUE(CompressPlan::create(t.views(), with_rules({}, 4.5, {"q*=1"})).has_value());
  // With every planned tensor fixed nothing is left to allocate, and nothing is refused.
  EXPECT_TRUE(CompressPlan::create(t.views(), with_rules({}, 1.0, {"*=8"})).has_value());
}

TEST(PackerSettings, RdoTurnsOnTheSlowerLeversAndTheFileRecordsThem) {
  const EncodeOptions plain = packer_encode_options(3.5, 0, 4);
  EXPECT_EQ(plain.target_bpp, 3.5);
  EXPECT_EQ(plain.rdo_sweeps, 0);
  EXPECT_EQ(plain.threads, 4);
  EXPECT_FALSE(plain.ecvq || plain.prune_tables || plain.fine_rate);
  EXPECT_TRUE(rdo_levers(0).empty());
  const EncodeOptions slow = packer_encode_options(3.5, 2, 1);
  EXPECT_EQ(slow.rdo_sweeps, 2);
  EXPECT_TRUE(slow.ecvq && slow.prune_tables && slow.fine_rate);
  EXPECT_EQ(rdo_levers(2), (std::vector<std::string>{"ecvq", "prune_tables", "fine_rate"}));
  const rans::EncodingInfo info = packer_encoding_info(3.5, 2);
  EXPECT_EQ(info.target_bpp, 3.5);
  EXPECT_EQ(info.rdo_sweeps, 2);
  EXPECT_EQ(info.rdo_candidates, slow.rdo_candidates);
}

TEST(CompressPlan, TheErrorGainPricesEachFreeTensor) {
  // Three identical free tensors; the error model says b's output error costs 16x a's and c's 1x: b gets two bits
  // more than a (four gain doublings), and the three still spend the budget. The gain is asked of free tensors only.
  Tensors t;
  for (const char* name : {"q.weight", "a.weight", "b.weight", "c.weight"}) t.add(name, {16, 32});
  std::vector<std::size_t> asked;
  const ErrorGain gain = [&](std::size_t i) -> Result<double> {
    asked.push_back(i);
    return i == 2 ? 16.0 : i == 1 ? 1.0 / 16 : 1.0;
  };
  auto p = CompressPlan::create(t.views(), with_rules({}, 4.0, {"q*=4"}), gain);
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_EQ(asked, (std::vector<std::size_t>{1, 2, 3}));
  EXPECT_NEAR(*p->target(1), 2.0, 1e-9);
  p->record_stored(0, bytes_at(4.0, 512));
  p->record_stored(1, bytes_at(2.0, 512));
  EXPECT_NEAR(*p->target(2), 6.0, 1e-9);
  p->record_stored(2, bytes_at(6.0, 512));
  EXPECT_NEAR(*p->target(3), 4.0, 1e-9);
  // A gain of 1 everywhere is the plan without a model; a gain's error is the plan's.
  auto ones =
      CompressPlan::create(t.views(), with_rules({}, 3.0, {}), [](std::size_t) -> Result<double> { return 1.0; });
  auto none = CompressPlan::create(t.views(), with_rules({}, 3.0, {}));
  ASSERT_TRUE(ones && none);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(*ones->target(i), *none->target(i));
  auto bad = CompressPlan::create(t.views(), with_rules({}, 3.0, {}), [](std::size_t) -> Result<double> {
    return make_error(ErrorCode::kInvalidArgument, "tensor 'b.weight': bad");
  });
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("b.weight"), std::string::npos);
  // Without a budget the model is not asked.
  asked.clear();
  ASSERT_TRUE(CompressPlan::create(t.views(), with_rules(4.0, {}, {}), gain).has_value());
  EXPECT_TRUE(asked.empty());
}

}  // namespace
}  // namespace epk::rate
