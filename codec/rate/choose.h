// Which stored form serves one 2-D weight at the rate a user asked for: lattice-rans when it meets the rate with a
// sane error, otherwise the tensor's own bytes (raw: exact). Every packer (epk compress, other writers of .epk files)
// goes through pack_tensor, so no tensor is ever silently destroyed: a tiny tensor's tables and headers can eat its
// whole bit budget, and its lattice form would then decode to all zeros while storing far more than the target rate.
//
// The rule (choose_form), with R the target rate, E the lattice candidate's relative L2 error against the source
// (sqrt(sum (x - ref)^2 / sum ref^2)) and B its stored rate (buffers + index entry per weight, docs/FORMAT.md 10.5):
//   raw   when E > max_rel_l2 (the error ceiling), or the reconstruction is all zero where the source is not,
//         (for a weight encoded with calibration statistics E is the H-weighted relative L2 error instead: feedback
//         rounding moves error into the input directions the layer's inputs do not reach, so the plain error of a
//         well calibrated layer can exceed the ceiling while its output error is well under the uncalibrated one's),
//         or B > max_rate_ratio * R (the rate the user asked for is out of reach),
//         or B >= the raw form's stored rate (raw is exact and no larger);
//   lattice-rans otherwise.
// The default ceiling follows the rate: default_max_rel_l2(R) = min(kMaxRelL2Cap, max(kMaxRelL2Floor,
// kMaxRelL2Factor * 2^-R)), i.e. min(0.9, max(0.01, 3 * 2^-R)): 0.75 at 2 bpp, 18.75% at 4, 1.17% at 8, 1% from
// 8.2 bpp up. 2^-R is the Gaussian rate-distortion bound on the relative error at R bits per weight; a large
// Gaussian layer lands at 1.16-1.26x of it from 0.5 to 6 bpp and 1.4-2x at 8-11 bpp (docs/measurements/
// pack-choice.md), so 3x keeps every normal layer encoded and refuses what is several times worse than a normal layer
// at the same rate. The floor: an error under 1% destroys nothing, whatever the rate; the cap: at 0.5-1 bpp a large
// layer's own error is 60-82%, and an all-zero reconstruction (100%) is refused by its own rule.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "codec/common/dtype.h"
#include "codec/common/result.h"
#include "codec/rans/container_io.h"
#include "codec/rans/encoded_tensor.h"
#include "codec/rate/encode.h"

namespace epk::rate {

inline constexpr double kMaxRelL2Factor = 3.0;
inline constexpr double kMaxRelL2Floor = 0.01;
inline constexpr double kMaxRelL2Cap = 0.9;
inline constexpr double kMaxRateRatio = 1.5;

// The ceiling on the relative L2 error at target rate R when the user gives none.
double default_max_rel_l2(double target_bpp);

enum class Form { kLatticeRans, kRaw };
const char* form_name(Form f);  // "lattice-rans" / "raw", as the container names the encodings

struct ChoicePolicy {
  std::optional<double> max_rel_l2;      // nullopt: default_max_rel_l2(target)
  double max_rate_ratio = kMaxRateRatio;  // B above this multiple of R: the rate is out of reach
};

// What was measured for one tensor's lattice candidate and its raw form.
struct Candidate {
  double target_bpp = 0;
  double lattice_bpp = 0;           // stored rate of the lattice-rans form
  double lattice_rel_l2 = 0;        // its relative L2 error (infinity when the source is all zero and it is not)
  // With calibration statistics: its H-weighted relative L2 error (calibration.h), which the ceiling then judges.
  std::optional<double> lattice_h_rel;
  bool lattice_zero = false;        // every reconstructed weight is zero
  bool source_zero = false;         // every source weight is zero
  double raw_bpp = 0;               // stored rate of the raw form
};

struct Choice {
  Form form = Form::kLatticeRans;
  std::string reason;  // empty for lattice-rans; for raw, what ruled the lattice candidate out, with its figures
  double max_rel_l2 = 0;  // the ceiling applied
};

Choice choose_form(const Candidate& c, const ChoicePolicy& policy);

// One tensor packed: the chosen form, the lattice candidate (kept when chosen) and the figures behind the choice.
struct Packed {
  Choice choice;
  Candidate candidate;
  rans::EncodedTensor lattice;   // meaningful when choice.form == kLatticeRans
  // The profile it is stored in (info.profile's, unless a native tensor's scales did not fit fp16: then the
  // reference one, and profile_note says why). Its scales are on the native grid when native.
  rans::StreamProfile profile = rans::StreamProfile::kReference;
  std::string profile_note;
  EncodeReport report;           // the lattice candidate's encoder report
  std::uint64_t stored_bytes = 0;  // of the chosen form (buffers + index entry)
  double stored_bpp = 0;           // of the chosen form
  double rel_l2 = 0;               // of the chosen form (0 for raw)
};

// The reconstruction of an encoded tensor measured against its source, as pack_tensor needs it.
struct ReconstructionError {
  double sse = 0;            // sum (decoded - source)^2 over rows x cols, in float64
  double source_energy = 0;  // sum source^2
  bool decoded_zero = true;
  bool source_zero = true;
};

// What pack_tensor encodes with: rate::encode on the CPU, or a device (codec/cuda/encode/encode.h). A backend that can
// measure its stream's reconstruction against the source (the decoder's arithmetic on the fields it coded, exact for
// a lossless coder) fills *error; otherwise pack_tensor decodes the stream on the host and measures it there.
class TensorEncoder {
 public:
  virtual ~TensorEncoder() = default;
  virtual Result<rans::EncodedTensor> encode(std::span<const std::byte> weights, std::uint32_t rows,
                                             std::uint32_t cols, DType dtype, const EncodeOptions& options,
                                             std::string_view name, EncodeReport* report,
                                             std::optional<ReconstructionError>* error) = 0;
  // Called before encoding a tensor: the bytes of the tensor to be encoded after it (empty: none), which a device
  // encoder copies to the device while it works on this one. They must stay valid and unchanged until encoded.
  // A hint only: the streams are the same without it.
  virtual void prefetch_next(std::span<const std::byte> next) { (void)next; }
};

// rate::encode itself, measuring nothing.
class CpuEncoder final : public TensorEncoder {
 public:
  Result<rans::EncodedTensor> encode(std::span<const std::byte> weights, std::uint32_t rows, std::uint32_t cols,
                                     DType dtype, const EncodeOptions& options, std::string_view name,
                                     EncodeReport* report, std::optional<ReconstructionError>* error) override;
};

// Encodes weights (rows x cols, row-major, dtype as rate::encode takes) at options.target_bpp, measures the candidate
// against the source and chooses. `info` is what params_json will record (its target and scale are filled in by the
// caller from the result); the stored rate is counted with the index entry that info's params produce, and the
// encoder's rate calibration counts the same (options.stored_bytes is set to it), so one encode meets the target.
// Errors: those of rate::encode and the decoder (kInvalidArgument for non-finite input, naming it).
Result<Packed> pack_tensor(std::span<const std::byte> weights, std::uint32_t rows, std::uint32_t cols, DType dtype,
                           const EncodeOptions& options, const ChoicePolicy& policy, const rans::EncodingInfo& info,
                           std::string_view name);
// The same with the given encoder.
Result<Packed> pack_tensor(TensorEncoder& encoder, std::span<const std::byte> weights, std::uint32_t rows,
                           std::uint32_t cols, DType dtype, const EncodeOptions& options, const ChoicePolicy& policy,
                           const rans::EncodingInfo& info, std::string_view name);

// Stored rate of a tensor kept raw (its bytes plus its index entry) with this name, shape and dtype.
std::uint64_t raw_stored_bytes(std::string_view name, std::uint32_t rows, std::uint32_t cols, DType dtype);

}  // namespace epk::rate
