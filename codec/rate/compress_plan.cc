#include "codec/rate/compress_plan.h"

#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "codec/common/shape.h"
#include "codec/decode/decode_tensor.h"
#include "codec/rate/encode.h"

namespace epk::rate {
namespace {

bool matches(const std::string& pattern, std::string_view name) {
  return ::fnmatch(pattern.c_str(), std::string(name).c_str(), 0) == 0;
}

// Sum of squares of the tensor's elements (the allocation's energy), converted to float32 in chunks.
Result<double> energy(const safetensors::TensorView& t) {
  const int w = dtype_bits(t.dtype) / 8;
  if (w == 0) return make_error(ErrorCode::kUnsupported, "tensor '" + t.name + "': sub-byte dtype");
  const std::uint64_t n = t.data.size() / std::uint64_t(w);
  constexpr std::size_t kChunk = 8192;
  float tmp[kChunk];
  double sum = 0;
  for (std::uint64_t i = 0; i < n; i += kChunk) {
    const std::size_t m = std::size_t(std::min<std::uint64_t>(kChunk, n - i));
    if (!decode::raw_to_f32(t.dtype, t.data.subspan(i * w, m * w), std::span<float>(tmp, m)))
      return make_error(ErrorCode::kUnsupported,
                        "tensor '" + t.name + "': dtype " + std::string(dtype_name(t.dtype)) + " is not a float dtype");
    for (std::size_t k = 0; k < m; ++k) sum += double(tmp[k]) * double(tmp[k]);
  }
  return sum;
}

}  // namespace

Result<RateRule> parse_rate_rule(const std::string& text) {
  const auto eq = text.rfind('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    return make_error(ErrorCode::kInvalidArgument,
                      "--rule '" + text + "': expected PATTERN=RATE (RATE a number or raw)");
  RateRule r{text.substr(0, eq), std::nullopt};
  const std::string value = text.substr(eq + 1);
  if (value == "raw") return r;
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  if (end == value.c_str() || *end != '\0' || !std::isfinite(v) || v < kMinTargetBpp || v > kMaxTargetBpp)
    return make_error(ErrorCode::kInvalidArgument,
                      "--rule '" + text + "': rate '" + value + "' is not raw or a number in [0.5, 16]");
  r.bpp = v;
  return r;
}

bool is_embedding(std::string_view name) {
  for (const char* p : {"*embed*", "*wte.*", "*wpe.*", "*tok_embeddings*"})
    if (matches(p, name)) return true;
  return false;
}

Status check_rates(const CompressSettings& s) {
  if (!s.bpp && !s.budget_bpp)
    return make_error(ErrorCode::kInvalidArgument, "give a rate: --bpp R (every encoded tensor) or --budget-bpp R");
  if (s.bpp && (!std::isfinite(*s.bpp) || *s.bpp < kMinTargetBpp || *s.bpp > kMaxTargetBpp))
    return make_error(ErrorCode::kInvalidArgument, "--bpp " + std::to_string(*s.bpp) + " is outside [0.5, 16]");
  if (s.budget_bpp &&
      (!std::isfinite(*s.budget_bpp) || *s.budget_bpp < kMinBudgetBpp || *s.budget_bpp > kMaxBudgetBpp))
    return make_error(ErrorCode::kInvalidArgument,
                      "--budget-bpp " + std::to_string(*s.budget_bpp) + " is outside [1, 8]");
  return {};
}

Result<TensorPlan> plan_tensor(const safetensors::TensorView& t, const CompressSettings& s) {
  const bool encodable = t.shape.size() == 2 && t.shape[0] > 0 && t.shape[1] > 0 && t.shape[0] <= 0xffffffffu &&
                         t.shape[1] <= 0xffffffffu && encode_input_supported(t.dtype);
  for (const auto& r : s.rules) {
    if (!matches(r.pattern, t.name)) continue;
    if (!r.bpp) return TensorPlan{false, true, 0.0, "rule " + r.pattern};
    if (!encodable)
      return make_error(ErrorCode::kInvalidArgument, "--rule " + r.pattern + ": tensor '" + t.name + "' (" +
                                                         std::string(dtype_name(t.dtype)) + " " +
                                                         shape_string(t.shape) +
                                                         ") cannot be encoded: only 2-D F32, BF16, F16, F8 and I8 "
                                                         "weights can");
    return TensorPlan{true, true, *r.bpp, {}};
  }
  if (t.shape.size() != 2) return TensorPlan{false, false, 0.0, t.shape.size() == 1 ? "1-D" : "not 2-D"};
  if (!encodable) return TensorPlan{false, false, 0.0, "dtype " + std::string(dtype_name(t.dtype))};
  if (!s.include_embeddings && is_embedding(t.name)) return TensorPlan{false, false, 0.0, "embedding"};
  return TensorPlan{true, false, s.bpp.value_or(0.0), {}};
}

Result<CompressPlan> CompressPlan::create(std::span<const safetensors::TensorView> tensors,
                                          const CompressSettings& settings, const ErrorGain& error_gain) {
  EPK_TRY(check_rates(settings));
  CompressPlan p;
  p.budget_bpp_ = settings.budget_bpp;
  for (const auto& t : tensors) {
    EPK_TRY_ASSIGN(auto plan, plan_tensor(t, settings));
    p.plans_.push_back(std::move(plan));
    p.weights_.push_back(element_count(t.shape));
  }
  if (!settings.budget_bpp) return p;
  double all_weights = 0, free_weights = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (!p.plans_[i].encode) continue;
    const double n = double(p.weights_[i]);
    all_weights += n;
    if (p.plans_[i].fixed) {
      p.fixed_left_bits_ += p.plans_[i].target * n;
      continue;
    }
    EPK_TRY_ASSIGN(double e, energy(tensors[i]));
    double gain = 1.0;
    if (error_gain) {
      EPK_TRY_ASSIGN(gain, error_gain(i));
    }
    p.free_.push_back({i, {p.weights_[i], e, gain}});
    free_weights += n;
  }
  p.budget_bits_ = *settings.budget_bpp * all_weights;
  if (!p.free_.empty()) {
    const double left = (p.budget_bits_ - p.fixed_left_bits_) / free_weights;
    if (left < kMinBudgetBpp || left > kMaxBudgetBpp)
      return make_error(ErrorCode::kInvalidArgument,
                        "--budget-bpp " + std::to_string(*settings.budget_bpp) + ": after the rule-fixed tensors, " +
                            std::to_string(left) + " bpp are left for the others, outside [1, 8]");
  }
  return p;
}

EncodeOptions packer_encode_options(double target_bpp, int rdo_sweeps, int threads) {
  EncodeOptions o;
  o.target_bpp = target_bpp;
  o.rdo_sweeps = rdo_sweeps;
  o.ecvq = o.prune_tables = o.fine_rate = rdo_sweeps > 0;
  o.threads = threads;
  return o;
}

rans::EncodingInfo packer_encoding_info(double target_bpp, int rdo_sweeps) {
  rans::EncodingInfo info;
  info.target_bpp = target_bpp;
  info.rdo_sweeps = rdo_sweeps;
  info.rdo_candidates = EncodeOptions{}.rdo_candidates;
  return info;
}

std::vector<std::string> rdo_levers(int rdo_sweeps) {
  if (rdo_sweeps <= 0) return {};
  return {"ecvq", "prune_tables", "fine_rate"};
}

Result<double> CompressPlan::target(std::size_t i) const {
  const TensorPlan& plan = plans_[i];
  if (!budget_bpp_ || !plan.encode || plan.fixed) return plan.target;
  // The free tensors from i on (i the first of them), spending what is left of the budget.
  const auto first = std::find_if(free_.begin(), free_.end(), [&](const Free& f) { return f.index >= i; });
  std::vector<LayerStats> stats;
  double free_weights = 0;
  for (auto it = first; it != free_.end(); ++it) {
    stats.push_back(it->stats);
    free_weights += double(it->stats.weights);
  }
  BudgetOptions bo;
  bo.min_bpp = kMinBudgetBpp;
  bo.max_bpp = kMaxBudgetBpp;
  // Past fallbacks can leave less than the floor (or more than the ceiling): the rest is then clamped, and what was
  // stored against the budget is the packer's to report.
  bo.budget_bpp = std::clamp((budget_bits_ - spent_bits_ - fixed_left_bits_) / free_weights, bo.min_bpp, bo.max_bpp);
  EPK_TRY_ASSIGN(auto targets, allocate_budget(stats, bo));
  return targets.front();
}

void CompressPlan::record_stored(std::size_t i, std::uint64_t bytes) {
  const TensorPlan& plan = plans_[i];
  if (!plan.encode) return;
  spent_bits_ += 8.0 * double(bytes);
  if (plan.fixed) fixed_left_bits_ -= plan.target * double(weights_[i]);
}

}  // namespace epk::rate
