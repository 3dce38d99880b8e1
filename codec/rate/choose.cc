#include "codec/rate/choose.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <vector>

#include "codec/decode/decode_tensor.h"
#include "codec/rans/decoder.h"

namespace epk::rate {
namespace {

std::string percent(double v) {
  if (!std::isfinite(v)) return "inf%";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", 100.0 * v);
  return buf;
}

std::string fixed3(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

}  // namespace

double default_max_rel_l2(double target_bpp) {
  return std::min(kMaxRelL2Cap, std::max(kMaxRelL2Floor, kMaxRelL2Factor * std::exp2(-target_bpp)));
}

const char* form_name(Form f) { return f == Form::kRaw ? "raw" : "lattice-rans"; }

Choice choose_form(const Candidate& c, const ChoicePolicy& policy) {
  Choice out;
  out.max_rel_l2 = policy.max_rel_l2.value_or(default_max_rel_l2(c.target_bpp));
  auto raw = [&](std::string why) {
    out.form = Form::kRaw;
    out.reason = std::move(why);
    return out;
  };
  if (c.lattice_zero && !c.source_zero) return raw("lattice-rans decodes to all zeros");
  if (c.lattice_h_rel) {
    if (!(*c.lattice_h_rel <= out.max_rel_l2)) {
      return raw("lattice-rans H-weighted error " + percent(*c.lattice_h_rel) + " above the ceiling " +
                 percent(out.max_rel_l2));
    }
  } else if (!(c.lattice_rel_l2 <= out.max_rel_l2)) {
    return raw("lattice-rans error " + percent(c.lattice_rel_l2) + " above the ceiling " + percent(out.max_rel_l2));
  }
  if (c.lattice_bpp > policy.max_rate_ratio * c.target_bpp) {
    return raw("lattice-rans stores " + fixed3(c.lattice_bpp) + " bpp, over " + fixed3(policy.max_rate_ratio) +
               "x the target " + fixed3(c.target_bpp));
  }
  if (c.lattice_bpp >= c.raw_bpp) {
    return raw("lattice-rans stores " + fixed3(c.lattice_bpp) + " bpp, raw " + fixed3(c.raw_bpp));
  }
  return out;
}

std::uint64_t raw_stored_bytes(std::string_view name, std::uint32_t rows, std::uint32_t cols, DType dtype) {
  const std::uint64_t n = std::uint64_t(rows) * cols;
  container::TensorSpec spec{std::string(name), {rows, cols}, dtype, container::Encoding::kRaw, "{}"};
  const std::vector<std::uint8_t> none;
  std::vector<container::BufferData> bufs{{"data", none}};
  // index_entry_bytes counts the buffer table, not the buffers' contents: an empty view stands in for the bytes.
  return n * std::uint64_t(dtype_bits(dtype)) / 8 + rans::index_entry_bytes(spec, bufs);
}

namespace {

struct Trial {
  rans::EncodedTensor lattice;
  EncodeReport report;
  std::optional<ReconstructionError> error;  // measured by the encoder
  Candidate candidate;  // target_bpp: the user's target, not the trial's
  std::uint64_t lattice_bytes = 0;
  rans::StreamProfile profile = rans::StreamProfile::kReference;
  std::string profile_note;
};

// Encodes at `trial_target`, the encoder's calibration counting the .epk form (buffers plus the index entry info's
// params produce), and measures the result against the source (decoded and converted to float32 here only when
// the encoder measured nothing).
Result<Trial> try_lattice(TensorEncoder& encoder, std::span<const std::byte> weights, std::uint32_t rows,
                          std::uint32_t cols, DType dtype, EncodeOptions options, double trial_target,
                          const rans::EncodingInfo& info, std::string_view name) {
  const double n = double(rows) * double(cols);
  Trial t;
  options.target_bpp = trial_target;
  // params_json's length before the scale is known: a scale printed at full precision.
  rans::EncodingInfo probe = info;
  probe.target_bpp = trial_target;
  probe.scale = 0.123456789012345;
  options.stored_bytes = [probe, tensor_name = std::string(name)](const rans::EncodedTensor& e) {
    return rans::stored_bytes_as(e, tensor_name, probe);
  };
  options.profile = info.profile;
  EPK_TRY_ASSIGN(t.lattice, encoder.encode(weights, rows, cols, dtype, options, name, &t.report, &t.error));
  rans::EncodingInfo final_info = info;
  final_info.target_bpp = trial_target;
  final_info.scale = t.report.scale;
  final_info.coarsened = t.report.coarsened;
  // The encoder put a native tensor's scales on the profile's grid (EncodeOptions::profile), so any error it measured
  // is the stored tensor's; a tensor whose scales span more than fp16 holds keeps the reference profile, and the
  // pack says so.
  if (info.profile == rans::StreamProfile::kNative && !t.report.profile_note.empty()) {
    final_info.profile = rans::StreamProfile::kReference;
    t.profile_note = t.report.profile_note;
  }
  t.profile = final_info.profile;
  t.lattice_bytes = rans::stored_bytes_as(t.lattice, name, final_info);

  // The decoded weights are measured here when the encoder measured nothing, and always with calibration
  // statistics (the H-weighted error needs the reconstruction).
  if (!t.error || options.calibration) {
    std::vector<float> source(std::size_t(rows) * cols);
    if (!decode::raw_to_f32(dtype,
                            std::span(reinterpret_cast<const std::uint8_t*>(weights.data()), weights.size()),
                            source)) {
      return make_error(ErrorCode::kInvalidArgument, "tensor '" + std::string(name) + "': dtype " +
                                                         std::string(dtype_name(dtype)) + " is not a float dtype");
    }
    std::vector<float> decoded(std::size_t(rows) * cols);
    EPK_TRY(rans::decode(t.lattice.view(), name, DType::kF32,
                         std::span<std::byte>(reinterpret_cast<std::byte*>(decoded.data()), decoded.size() * 4),
                         std::max(1, options.threads)));
    if (!t.error) {
      ReconstructionError e;
      for (std::size_t i = 0; i < decoded.size(); ++i) {
        const double d = double(decoded[i]) - double(source[i]);
        e.sse += d * d;
        e.source_energy += double(source[i]) * double(source[i]);
        e.decoded_zero = e.decoded_zero && decoded[i] == 0.0f;
        e.source_zero = e.source_zero && source[i] == 0.0f;
      }
      t.error = e;
    }
    if (options.calibration) {
      t.candidate.lattice_h_rel =
          h_weighted_relative_error(source, decoded, rows, *options.calibration, std::max(1, options.threads));
    }
  }
  const double num = t.error->sse, den = t.error->source_energy;
  const bool dec_zero = t.error->decoded_zero, src_zero = t.error->source_zero;
  Candidate& c = t.candidate;
  c.lattice_bpp = 8.0 * double(t.lattice_bytes) / n;
  c.lattice_rel_l2 = den > 0 ? std::sqrt(num / den) : (num == 0 ? 0.0 : std::numeric_limits<double>::infinity());
  c.lattice_zero = dec_zero;
  c.source_zero = src_zero;
  return t;
}

}  // namespace

Result<rans::EncodedTensor> CpuEncoder::encode(std::span<const std::byte> weights, std::uint32_t rows,
                                               std::uint32_t cols, DType dtype, const EncodeOptions& options,
                                               std::string_view name, EncodeReport* report,
                                               std::optional<ReconstructionError>* error) {
  if (error) error->reset();
  return rate::encode(weights, rows, cols, dtype, options, name, report);
}

Result<Packed> pack_tensor(std::span<const std::byte> weights, std::uint32_t rows, std::uint32_t cols, DType dtype,
                           const EncodeOptions& options, const ChoicePolicy& policy, const rans::EncodingInfo& info,
                           std::string_view name) {
  CpuEncoder cpu;
  return pack_tensor(cpu, weights, rows, cols, dtype, options, policy, info, name);
}

Result<Packed> pack_tensor(TensorEncoder& encoder, std::span<const std::byte> weights, std::uint32_t rows,
                           std::uint32_t cols, DType dtype, const EncodeOptions& options, const ChoicePolicy& policy,
                           const rans::EncodingInfo& info, std::string_view name) {
  const double n = double(rows) * double(cols);
  const double target = options.target_bpp;
  EPK_TRY_ASSIGN(Trial t, try_lattice(encoder, weights, rows, cols, dtype, options, target, info, name));
  const std::uint64_t raw_bytes = raw_stored_bytes(name, rows, cols, dtype);
  Packed p;
  p.candidate = t.candidate;
  p.candidate.target_bpp = target;
  p.candidate.raw_bpp = 8.0 * double(raw_bytes) / n;
  p.report = t.report;
  p.choice = choose_form(p.candidate, policy);
  if (p.choice.form == Form::kRaw) {
    p.stored_bytes = raw_bytes;
    p.rel_l2 = 0.0;
  } else {
    p.lattice = std::move(t.lattice);
    p.profile = t.profile;
    p.profile_note = std::move(t.profile_note);
    p.stored_bytes = t.lattice_bytes;
    p.rel_l2 = p.candidate.lattice_rel_l2;
  }
  p.stored_bpp = 8.0 * double(p.stored_bytes) / n;
  return p;
}

}  // namespace epk::rate
