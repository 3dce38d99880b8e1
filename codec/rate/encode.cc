#include "codec/rate/encode.h"

#include <memory>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "codec/common/bytes.h"
#include "codec/common/float_convert.h"
#include "codec/common/parallel.h"
#include "codec/rans/decoder.h"
#include "codec/model/tables.h"
#include "codec/rans/encoder.h"
#include "codec/rans/native_format.h"
#include "codec/rate/ecvq.h"
#include "codec/rate/feedback.h"
#include "codec/rate/encode_steps.h"
#include "codec/rate/rdo.h"
#include "codec/rate/refit.h"
#include "codec/rate/search.h"
#include "codec/rate/tile_length.h"

namespace epk::rate {

namespace {

model::FieldCounts count_fields_parallel(const lattice::QuantizedFields& q, int threads) {
  model::FieldCounts total;
  std::mutex mu;
  parallel_for_blocks(q.vectors(), 65536, threads, [&](std::size_t b, std::size_t e) {
    const model::FieldCounts part = model::count_fields(&q.coset[b], &q.fields[b * lattice::kFields], e - b);
    std::lock_guard<std::mutex> lock(mu);
    model::merge_counts(total, part);
  });
  return total;
}

constexpr float kMinRms = 1e-12f;
// Secant steps on the measured rate of a tensor its sample covers: each codes the tensor once.
constexpr int kMeasuredSteps = 4;
constexpr double kCoarsenMargin = 1.05;

Error invalid(std::string_view name, const std::string& what) {
  return make_error(ErrorCode::kInvalidArgument, "tensor '" + std::string(name) + "': " + what);
}

float load_weight(const std::byte* p, DType t) {
  switch (t) {
    case DType::kF32: return load_le<float>(p);
    case DType::kBF16: return float_from_bf16(load_le<std::uint16_t>(p));
    case DType::kF16: return float_from_f16(load_le<std::uint16_t>(p));
    case DType::kF8E4M3: return float_from_f8e4m3(std::uint8_t(*p));
    case DType::kF8E5M2: return float_from_f8e5m2(std::uint8_t(*p));
    case DType::kI8: return float(std::int8_t(*p));
    default: return 0.0f;
  }
}


// The CPU steps: the encoder's arrays on the host, every step a codec function on `threads` threads.
class CpuSteps final : public EncodeSteps {
 public:
  explicit CpuSteps(int threads) : threads_(std::max(1, threads)) {}

  Result<SampleStats> load(std::span<const std::byte> weights, std::uint32_t rows, std::uint32_t cols,
                           DType dtype, const std::vector<std::uint32_t>& sample) override {
    EPK_TRY(check_sample_rows(sample, rows));
    rows_ = rows;
    padded_ = (cols + 7) / 8 * 8;
    const std::size_t esize = std::size_t(dtype_bits(dtype) / 8);
    const std::uint32_t padded = padded_;
    // Source weights as float32, zero-padded to whole vectors; then the row RMS (over the padded row, as the
    // reference) and the normalised rows x / rms in float32.
    x_.assign(std::size_t(rows) * padded, 0.0f);
    SourceStats st;
    st.rms.resize(rows);
    normalized_.resize(x_.size());
    std::vector<std::int64_t> bad_at(rows, -1);
    std::vector<float> row_max(rows, 0.0f);
    std::vector<float>& rms = st.rms;
    parallel_for_blocks(rows, 64, threads_, [&](std::size_t r0, std::size_t r1) {
      for (std::size_t r = r0; r < r1; ++r) {
        double sum2 = 0.0;
        float m = 0.0f;
        for (std::size_t c = 0; c < cols; ++c) {
          const float v = load_weight(weights.data() + (r * cols + c) * esize, dtype);
          if (!std::isfinite(v)) {
            if (bad_at[r] < 0) bad_at[r] = std::int64_t(c);
            continue;
          }
          x_[r * padded + c] = v;
          sum2 += double(v) * double(v);
          m = std::max(m, std::fabs(v));
        }
        row_max[r] = m;
        rms[r] = std::max(float(std::sqrt(sum2 / double(padded))), kMinRms);
        for (std::size_t c = 0; c < padded; ++c) normalized_[r * padded + c] = x_[r * padded + c] / rms[r];
      }
    });
    for (std::uint32_t r = 0; r < rows; ++r) {
      if (bad_at[r] >= 0) {
        st.bad_row = r;
        st.bad_col = bad_at[r];
        break;
      }
    }
    st.max_abs = *std::max_element(row_max.begin(), row_max.end());
    // Columns no calibration input reached are quantised as zeros (GPTQ's dead columns); the refit still reads x_.
    if (factor_) {
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c)
          if (factor_->dead[c]) normalized_[r * padded + c] = 0.0f;
    }
    rms_ = st.rms;
    arrays_ = HostArrays{x_.data(), normalized_.data(), &q_};
    stats_ = std::move(st);
    SampleStats sampled;
    for (const std::uint32_t r : sample) {
      sampled.finite = sampled.finite && bad_at[r] < 0;
      sampled.max_abs = std::max(sampled.max_abs, row_max[r]);
    }
    set_sample(sample);
    return sampled;
  }

  Result<SourceStats> source_stats() override { return stats_; }

  void set_sample(const std::vector<std::uint32_t>& sample) {
    sample_rows_ = sample.size();
    sample_ptr_ = normalized_.data();
    sample_x_.clear();
    if (sample.size() < rows_) {
      sample_x_.resize(sample.size() * padded_);
      for (std::size_t i = 0; i < sample.size(); ++i) {
        std::memcpy(&sample_x_[i * padded_], &normalized_[std::size_t(sample[i]) * padded_], padded_ * sizeof(float));
      }
      sample_ptr_ = sample_x_.data();
    }
  }

  Status set_calibration(const HessianView& h, std::string_view name) override {
    EPK_TRY_ASSIGN(FeedbackFactor f, make_feedback_factor(h, name, threads_));
    factor_ = std::move(f);
    return {};
  }

  model::FieldCounts sample_counts(float scale) override {
    if (factor_) {
      lattice::QuantizedFields q;
      quantize_feedback(sample_ptr_, sample_rows_, padded_, scale, *factor_, q, threads_);
      return count_fields_parallel(q, threads_);
    }
    return quantize_counts(sample_ptr_, sample_rows_ * (padded_ / 8), scale, threads_);
  }

  Result<SampleCoded> sample_code(float scale, std::uint32_t cols, int prob_bits,
                                  std::uint32_t tile_symbols) override {
    if (factor_) {
      // code_sample's coding of the sample, on its feedback-rounded fields.
      lattice::QuantizedFields q;
      quantize_feedback(sample_ptr_, sample_rows_, padded_, scale, *factor_, q, threads_);
      SampleCoded out;
      out.counts = count_fields_parallel(q, threads_);
      rans::EncodeGeometry g{std::uint32_t(sample_rows_), cols, std::uint32_t(prob_bits), tile_symbols, DType::kF32};
      EPK_TRY_ASSIGN(out.coded, rans::encode_fields(q, std::vector<float>(sample_rows_, 1.0f), g, threads_));
      return out;
    }
    return code_sample(sample_ptr_, sample_rows_, padded_, cols, scale, prob_bits, tile_symbols, threads_);
  }

  Status quantize(float scale) override {
    if (factor_) {
      quantize_feedback(normalized_.data(), rows_, padded_, scale, *factor_, q_, threads_);
      return {};
    }
    quantize_all(normalized_.data(), std::size_t(rows_) * (padded_ / 8), scale, q_, threads_);
    return {};
  }

  model::FieldCounts counts() override { return count_fields_parallel(q_, threads_); }

  Status refit(double scale, std::vector<float>& scales, std::vector<double>* row_sse) override {
    if (factor_) {
      // row_sse feeds row RDO only, which encode_with refuses with statistics.
      refit_rows_h(x_.data(), rows_, padded_, q_, scale, rms_.data(), *factor_, scales, threads_);
      if (row_sse) row_sse->assign(rows_, 0.0);
      return {};
    }
    refit_rows(x_.data(), rows_, padded_, q_, scale, rms_.data(), scales, row_sse, threads_);
    return {};
  }

  Result<rans::EncodedTensor> code(std::vector<float> scales, const rans::EncodeGeometry& g) override {
    return rans::encode_fields(q_, std::move(scales), g, threads_);
  }

  HostArrays* host() override { return &arrays_; }
  Status fields_changed() override { return {}; }

 private:
  int threads_;
  std::uint32_t rows_ = 0;
  std::uint32_t padded_ = 0;
  std::vector<float> x_, normalized_, rms_, sample_x_;
  SourceStats stats_;
  const float* sample_ptr_ = nullptr;
  std::size_t sample_rows_ = 0;
  lattice::QuantizedFields q_;
  HostArrays arrays_;
  std::optional<FeedbackFactor> factor_;
};

}  // namespace

Status check_sample_rows(const std::vector<std::uint32_t>& sample, std::uint32_t rows) {
  for (const std::uint32_t r : sample) {
    if (r >= rows) {
      return make_error(ErrorCode::kInvalidArgument,
                        "encoder: sample row " + std::to_string(r) + " of a " + std::to_string(rows) + "-row tensor");
    }
  }
  return {};
}

std::unique_ptr<EncodeSteps> make_cpu_steps(int threads) { return std::make_unique<CpuSteps>(threads); }

// The paper's dtype table: a tensor is encoded from the same six dtypes the decoder reconstructs into.
bool encode_input_supported(DType t) { return rans::decode_output_supported(t); }

Result<rans::EncodedTensor> encode(std::span<const std::byte> weights, std::uint32_t rows, std::uint32_t cols,
                                   DType dtype, const EncodeOptions& o, std::string_view name,
                                   EncodeReport* report) {
  CpuSteps steps(o.threads);
  return encode_with(steps, weights, rows, cols, dtype, o, name, report);
}

Result<rans::EncodedTensor> encode_with(EncodeSteps& steps, std::span<const std::byte> weights, std::uint32_t rows,
                                        std::uint32_t cols, DType dtype, const EncodeOptions& o,
                                        std::string_view name, EncodeReport* report) {
  if (rows == 0 || cols == 0) return invalid(name, "empty shape");
  if (cols > 0xfffffff0u) return invalid(name, "too many columns");
  if (!encode_input_supported(dtype)) return invalid(name, "input dtype " + std::string(dtype_name(dtype)));
  const std::size_t esize = std::size_t(dtype_bits(dtype) / 8);
  if (weights.size() != std::size_t(rows) * cols * esize) {
    return invalid(name, std::to_string(weights.size()) + " bytes for " + std::to_string(rows) + "x" +
                             std::to_string(cols) + " " + std::string(dtype_name(dtype)));
  }
  if (!(o.target_bpp >= 0.001 && o.target_bpp <= 11.0)) return invalid(name, "target_bpp outside [0.001, 11]");
  if (o.rdo_sweeps < 0 || o.rdo_sweeps > 8) return invalid(name, "rdo_sweeps outside [0, 8]");
  if (o.rdo_candidates < 1) return invalid(name, "rdo_candidates below 1");
  if (o.ecvq_iterations < 1 || o.ecvq_iterations > 8) return invalid(name, "ecvq_iterations outside [1, 8]");
  if (!(o.ecvq_lambda >= 0.0 && o.ecvq_lambda <= 16.0)) return invalid(name, "ecvq_lambda outside [0, 16]");
  if (!(o.rdo_ratio_low > 0.0 && o.rdo_ratio_low <= 1.0 && o.rdo_ratio_high >= 1.0 && o.rdo_ratio_high <= 16.0)) {
    return invalid(name, "rdo ratio range must hold 1 within (0, 16]");
  }
  if (o.prob_bits != 0 && (o.prob_bits < model::kMinProbBits || o.prob_bits > model::kMaxProbBits)) {
    return invalid(name, "prob_bits outside 9..15");
  }
  if (o.search_iterations < 1 || o.search_max_vectors < 1) return invalid(name, "search settings below 1");
  if (o.calibration) {
    if (o.calibration->cols != cols)
      return invalid(name, "statistics for " + std::to_string(o.calibration->cols) + " input columns, the weight has " +
                               std::to_string(cols));
    if (o.ecvq || o.rdo_sweeps > 0) return invalid(name, "calibrated rounding does not combine with ECVQ or row RDO");
    EPK_TRY(steps.set_calibration(*o.calibration, name));
  }
  const int threads = std::max(1, o.threads);
  const double target = std::min(o.target_bpp, double(dtype_bits(dtype)));
  const std::uint32_t padded = (cols + 7) / 8 * 8;

  HostArrays* host = nullptr;
  if (o.ecvq || o.rdo_sweeps > 0) {
    host = steps.host();
    if (!host) return invalid(name, "ECVQ and row RDO need the host encoder's arrays (this backend keeps none)");
  }
  int prob_bits = o.prob_bits ? o.prob_bits : model::initial_prob_bits(target);
  const bool auto_bits = o.prob_bits == 0;
  const std::uint32_t tile_symbols =
      o.tile_symbols ? o.tile_symbols : tile_symbols_for(target, std::uint64_t(rows) * padded / 8, o.profile);
  const std::vector<std::uint32_t> sample = sample_rows(rows, padded, o.search_max_vectors);
  EPK_TRY_ASSIGN(const SampleStats sampled, steps.load(weights, rows, cols, dtype, sample));

  // A tensor its sample covers, quantised plainly, has its stored rate measured (measured_scale): the model has
  // nothing left to correct.
  const bool measured = o.calibrate_rate && sample.size() == rows && !o.ecvq && o.rdo_sweeps == 0;
  const double tolerance = o.fine_rate ? 0.0003 : 0.002;
  auto sample_counts = [&](float s) { return steps.sample_counts(s); };
  // The scale search at `bits`: bisection on the sample's modelled rate, then calibrated against the sample coded
  // (and measured, for a tensor its sample covers).
  struct Search {
    double scale = 1.0;
    Calibration cal;
  };
  auto search = [&](int bits) {
    Search out;
    out.scale = bisect_scale(sample_counts, sample.size(), padded, target, bits, tile_symbols, o.search_iterations);
    if (o.calibrate_rate) {
      auto sample_code = [&](float s) { return steps.sample_code(s, cols, bits, tile_symbols); };
      out.cal = calibrate_scale(sample_counts, sample_code, sample.size(), cols, target, bits, tile_symbols,
                                out.scale, o.stored_bytes, o.profile);
      out.scale = out.cal.scale;
      if (measured) {
        out.scale = measured_scale(sample_code, o.stored_bytes, rows, cols, target, out.scale, out.cal.slope,
                                   tolerance, kMeasuredSteps);
      }
    }
    return out;
  };
  // The search reads the sample only, so where the sample is finite and not all zero it runs before the whole
  // source's statistics are asked for (a device copies the rest of the source meanwhile). The whole tensor is then
  // not all zero either, so the checks below cannot skip the search: it is the one they would have run.
  std::optional<Search> early;
  if (sampled.finite && sampled.max_abs > 0.0f) early = search(prob_bits);
  EPK_TRY_ASSIGN(SourceStats stats, steps.source_stats());
  if (stats.bad_row >= 0) {
    return invalid(name, "non-finite weight at row " + std::to_string(stats.bad_row) + ", column " +
                             std::to_string(stats.bad_col));
  }
  const std::vector<float>& rms = stats.rms;
  const float max_abs = stats.max_abs;

  std::vector<float> scales;
  std::vector<double> row_sse;
  double scale = 1.0;
  bool coarsened = false;
  EcvqReport ecvq_report;

  if (max_abs == 0.0f) {
    EPK_TRY(steps.quantize(1.0f));
    EPK_TRY(steps.refit(1.0, scales, nullptr));
  } else {
    for (;;) {
      bool escalate = false;
      const Search found = early ? *early : search(prob_bits);
      early.reset();
      scale = found.scale;
      const Calibration cal = found.cal;
      // Whole-tensor corrections left: the sample misjudges heavy tails, and at high rates its frequency tables
      // weigh more than the whole tensor's do, so the sample's scale can miss by a percent.
      int full_checks = (!o.calibrate_rate || sample.size() == rows) ? 0 : 2;
      // ECVQ lowers the rate at a given scale (the sample's search never saw it), and the fine step asks for more.
      if (o.calibrate_rate && (o.ecvq || o.fine_rate)) full_checks = 8;
      if (measured) full_checks = 0;
      // ECVQ can start far below the target (at low rates it drops a third of the bits at the sample's scale).
      const double max_step = o.ecvq ? 0.4 : 0.2;
      double prev_log_scale = 0.0;
      double prev_bpp = 0.0;
      bool have_prev = false;
      std::uint32_t table_size = 1u << prob_bits;
      // With row RDO, ECVQ runs after it (each row at its chosen scale) and the rate is checked after both.
      const bool ecvq_after_rdo = o.ecvq && o.rdo_sweeps > 0;
      EcvqOptions eo;
      eo.iterations = o.ecvq_iterations;
      eo.lambda_factor = o.ecvq_lambda;
      eo.prob_bits = prob_bits;
      eo.prune_tables = o.prune_tables;
      eo.threads = threads;
      // True (and a new scale) when the whole tensor's calibrated rate misses the target by more than the tolerance.
      auto retarget = [&](const model::FieldCounts& counts) {
        const double bpp = calibrated_bpp(counts, rows, cols, prob_bits, tile_symbols, cal);
        if (std::fabs(bpp / target - 1.0) <= tolerance) return false;
        // Secant through the previous whole-tensor point when there is one, else the high-rate slope: one bit
        // per weight per halving of the scale.
        double slope = -1.0 / std::log(2.0);
        if (have_prev && bpp != prev_bpp && std::log(scale) != prev_log_scale) {
          const double secant = (bpp - prev_bpp) / (std::log(scale) - prev_log_scale);
          if (secant < 0.0) slope = secant;
        }
        prev_log_scale = std::log(scale);
        prev_bpp = bpp;
        have_prev = true;
        scale *= std::exp(std::clamp((target - bpp) / slope, -max_step, max_step));
        return true;
      };
      for (;;) {
        EPK_TRY(steps.quantize(float(scale)));
        if (o.ecvq && !ecvq_after_rdo) {
          choose_points(host->normalized, rms.data(), rows, padded, float(scale), *host->q, eo, &ecvq_report);
          EPK_TRY(steps.fields_changed());
        }
        const model::FieldCounts counts = steps.counts();
        std::uint32_t alpha = model::max_alphabet(counts);
        if (alpha <= table_size && full_checks > 0 && !ecvq_after_rdo) {
          --full_checks;
          if (retarget(counts)) continue;
        }
        if (alpha <= table_size) {
          EPK_TRY(steps.refit(scale, scales, &row_sse));
          if (o.rdo_sweeps > 0) {
            RdoProblem p;
            p.x = host->x;
            p.normalized = host->normalized;
            p.rms = rms.data();
            p.rows = rows;
            p.padded_cols = padded;
            p.scale = scale;
            p.prob_bits = prob_bits;
            p.tile_symbols = tile_symbols;
            p.sweeps = o.rdo_sweeps;
            p.candidates = o.rdo_candidates;
            p.ratio_low = o.rdo_ratio_low;
            p.ratio_high = o.rdo_ratio_high;
            p.threads = threads;
            std::vector<double> ratios;
            optimize_rows(p, *host->q, scales, row_sse, &ratios);
            EPK_TRY(steps.fields_changed());
            if (ecvq_after_rdo) {
              std::vector<float> row_scales(rows);
              for (std::uint32_t r = 0; r < rows; ++r) row_scales[r] = float(scale * ratios[r]);
              choose_points(host->normalized, rms.data(), rows, padded, row_scales.data(), *host->q, eo,
                            &ecvq_report);
              EPK_TRY(steps.fields_changed());
              EPK_TRY(steps.refit(scale, scales, &row_sse));
            }
            // RDO can widen an alphabet past what the baseline fitted.
            const model::FieldCounts after = steps.counts();
            alpha = model::max_alphabet(after);
            if (ecvq_after_rdo && alpha <= table_size && full_checks > 0) {
              --full_checks;
              if (retarget(after)) continue;
            }
          }
        }
        if (alpha <= table_size) break;
        if (auto_bits && prob_bits < model::kMaxProbBits) {
          ++prob_bits;
          escalate = true;
          break;
        }
        coarsened = true;
        scale *= double(alpha) / double(table_size) * kCoarsenMargin;
      }
      if (!escalate) break;
    }
  }

  std::string profile_note;
  if (o.profile == rans::StreamProfile::kNative) {
    std::vector<float> rounded = scales;
    if (auto shift = rans::round_scales_to_native(rounded)) {
      scales = std::move(rounded);
    } else {
      profile_note = "kept the reference profile: " + shift.error().message;
    }
  }
  rans::EncodeGeometry g{rows, cols, std::uint32_t(prob_bits), tile_symbols, dtype};
  EPK_TRY_ASSIGN(rans::EncodedTensor out, steps.code(std::move(scales), g));
  if (report) {
    report->scale = scale;
    report->prob_bits = prob_bits;
    report->coarsened = coarsened;
    report->estimated_bytes = model::estimate_stored_bytes(steps.counts(), rows, prob_bits, tile_symbols);
    report->max_abs_input = max_abs;
    report->ecvq_lambda = ecvq_report.lambda;
    report->ecvq_changed = ecvq_report.changed;
    report->pruned_entries = ecvq_report.pruned_entries;
    report->profile_note = std::move(profile_note);
  }
  return out;
}

}  // namespace epk::rate
