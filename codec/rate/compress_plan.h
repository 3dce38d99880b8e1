// The compress policy of a whole checkpoint, for every packer (epk compress, other writers of .epk files): which
// tensors are encoded as lattice-rans, at what target rate, and why the others stay raw; and, under a total budget,
// the target of each tensor given what the tensors before it were stored as.
//
// Planning, per tensor in checkpoint order (plan_tensor):
//   1. the rules, first match wins (a glob on the tensor's name, fnmatch without flags): `raw` keeps it raw; a rate
//      fixes its target, and a tensor that cannot be encoded (not 2-D with both sides in [1, 2^32), or a dtype
//      rate::encode does not take) is an error naming the rule and the tensor;
//   2. otherwise a tensor that is not 2-D or whose dtype cannot be encoded stays raw ("1-D", "not 2-D", "dtype X");
//   3. an embedding table (is_embedding) stays raw unless include_embeddings;
//   4. the rest is encoded at `bpp`, or under a budget at the allocated rate.
//
// The budget (budget_bpp * the weights of every tensor planned for encoding) counts each such tensor at what it is
// stored as (buffers plus index entry, docs/FORMAT.md 10.5; a raw fallback at its raw size). Rule-fixed rates are
// spent first; the rest goes to the free tensors by rate::allocate_budget (codec/rate/budget.h), within
// [kMinBudgetBpp, kMaxBudgetBpp] per tensor. The allocation is redone before each free tensor over the free tensors
// still to come with the bits still left, so a fallback's extra bits are taken from the tensors after it. What the
// allocation minimises is the packer's error model (ErrorGain): the weight error by default; under calibration the
// estimated output error of the tensors with statistics (codec/rate/output_error.h).
//
// Settings are named in errors by epk compress's flags (--bpp, --budget-bpp, --rule).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "codec/common/result.h"
#include "codec/rans/container_io.h"
#include "codec/rate/budget.h"
#include "codec/rate/encode.h"
#include "codec/safetensors/reader.h"

namespace epk::rate {

// A target rate given by --bpp or a rule.
inline constexpr double kMinTargetBpp = 0.5;
inline constexpr double kMaxTargetBpp = 16.0;
// --budget-bpp, and each free tensor's allocated rate under it.
inline constexpr double kMinBudgetBpp = 1.0;
inline constexpr double kMaxBudgetBpp = 8.0;

struct RateRule {
  std::string pattern;        // glob on the tensor name
  std::optional<double> bpp;  // nullopt: raw
};

// "PATTERN=RATE", split at the last '=', RATE `raw` or a number in [kMinTargetBpp, kMaxTargetBpp].
// kInvalidArgument quoting the text otherwise.
Result<RateRule> parse_rate_rule(const std::string& text);

// Whether the name is an embedding table's: *embed*, *wte.*, *wpe.* or *tok_embeddings*.
bool is_embedding(std::string_view name);

struct CompressSettings {
  std::optional<double> bpp;         // target of every free tensor; ignored for them under a budget
  std::optional<double> budget_bpp;  // bits per weight over every tensor planned for encoding
  std::vector<RateRule> rules;       // in order: the first match wins
  bool include_embeddings = false;
};

// The rates alone (what can be checked before a checkpoint is opened): one of bpp and budget_bpp given, bpp in
// [kMinTargetBpp, kMaxTargetBpp], budget_bpp in [kMinBudgetBpp, kMaxBudgetBpp]; kInvalidArgument naming the flag.
Status check_rates(const CompressSettings& settings);

struct TensorPlan {
  bool encode = false;  // planned for lattice-rans (pack_tensor may still store it raw)
  bool fixed = false;   // the rate or raw came from a rule
  double target = 0.0;  // encoded tensors: the rule's rate or bpp (0 under a budget without bpp: see target())
  std::string why;      // raw tensors: why they stay raw
};

// The encoder's settings for one tensor at `target_bpp`, and what the file records of them. rdo_sweeps > 0 (row
// RDO) also turns on the encoder's other slower levers, ECVQ point choice, table pruning and the fine rate step
// (each trades encode time for a little rate at the same error: docs/measurements/cpu-codec-error.md), so one
// setting asks for "slower and smaller"; rdo_levers names them as compress records them in the file's settings.
EncodeOptions packer_encode_options(double target_bpp, int rdo_sweeps, int threads);
rans::EncodingInfo packer_encoding_info(double target_bpp, int rdo_sweeps);
std::vector<std::string> rdo_levers(int rdo_sweeps);

// Steps 1-3 of the planning for one tensor.
Result<TensorPlan> plan_tensor(const safetensors::TensorView& t, const CompressSettings& settings);

// The error model of the budget: tensor i's gain (LayerStats::gain), asked once for each free tensor under a budget.
// Empty: every gain 1, the weight error.
using ErrorGain = std::function<Result<double>(std::size_t i)>;

class CompressPlan {
 public:
  // Plans every tensor; under a budget, measures each free tensor's energy (reading its bytes) and checks that the
  // rate left for the free tensors after the rule-fixed ones is in [kMinBudgetBpp, kMaxBudgetBpp]. Errors: those of
  // check_rates, plan_tensor and error_gain, and that refusal, naming --budget-bpp and the rate left. The plan
  // keeps no reference to `tensors` or `error_gain`.
  static Result<CompressPlan> create(std::span<const safetensors::TensorView> tensors,
                                     const CompressSettings& settings, const ErrorGain& error_gain = {});

  std::size_t size() const { return plans_.size(); }
  const TensorPlan& plan(std::size_t i) const { return plans_[i]; }

  // The target to encode tensor i at (i < size(), plan(i).encode), given the tensors recorded so far: a free tensor
  // under a budget gets its share of the allocation over the free tensors from i on with the bits left (clamped to
  // [kMinBudgetBpp, kMaxBudgetBpp] per weight when past fallbacks left less or more); any other its planned target.
  // Under a budget the tensors planned for encoding before i must have been recorded (record_stored) first.
  // Errors: those of rate::allocate_budget.
  Result<double> target(std::size_t i) const;

  // Tensor i was stored in `bytes` (buffers plus index entry, whichever form pack_tensor chose): what later targets
  // are computed from. Call once per tensor planned for encoding, after encoding it; for a tensor planned raw it
  // does nothing (the budget does not cover those).
  void record_stored(std::size_t i, std::uint64_t bytes);

 private:
  struct Free {
    std::size_t index = 0;
    LayerStats stats;
  };
  std::vector<TensorPlan> plans_;
  std::vector<std::uint64_t> weights_;
  std::optional<double> budget_bpp_;
  std::vector<Free> free_;     // the free tensors under a budget, in order
  double budget_bits_ = 0.0;
  double spent_bits_ = 0.0;       // stored bits of the tensors recorded
  double fixed_left_bits_ = 0.0;  // rule-fixed bits of the rule-fixed tensors not yet recorded
};

}  // namespace epk::rate
