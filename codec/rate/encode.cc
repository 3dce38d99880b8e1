#include "codec/rate/encode.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "codec/common/bytes.h"
#include "codec/common/float_convert.h"
#include "codec/common/parallel.h"
#include "codec/rans/decoder.h"
#include "codec/model/tables.h"
#include "codec/rans/encoder.h"
#include "codec/rate/ecvq.h"
#include "codec/rate/rdo.h"
#include "codec/rate/refit.h"
#include "codec/rate/search.h"

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

}  // namespace

// The paper's dtype table: a tensor is encoded from the same six dtypes the decoder reconstructs into.
bool encode_input_supported(DType t) { return rans::decode_output_supported(t); }

Result<rans::EncodedTensor> encode(std::span<const std::byte> weights, std::uint32_t rows, std::uint32_t cols,
                                   DType dtype, const EncodeOptions& o, std::string_view name,
                                   EncodeReport* report) {
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
  const int threads = std::max(1, o.threads);
  const double target = std::min(o.target_bpp, double(dtype_bits(dtype)));
  const std::uint32_t padded = (cols + 7) / 8 * 8;
  const std::size_t vpr = padded / 8;
  const std::size_t vectors = std::size_t(rows) * vpr;

  // Source weights as float32, zero-padded to whole vectors; then the row RMS (over the padded row, as the
  // reference) and the normalised rows x / rms in float32.
  std::vector<float> x(std::size_t(rows) * padded, 0.0f);
  std::vector<float> rms(rows);
  std::vector<float> normalized(x.size());
  std::vector<std::int64_t> bad_at(rows, -1);
  std::vector<float> row_max(rows, 0.0f);
  parallel_for_blocks(rows, 64, threads, [&](std::size_t r0, std::size_t r1) {
    for (std::size_t r = r0; r < r1; ++r) {
      double sum2 = 0.0;
      float m = 0.0f;
      for (std::size_t c = 0; c < cols; ++c) {
        const float v = load_weight(weights.data() + (r * cols + c) * esize, dtype);
        if (!std::isfinite(v)) {
          if (bad_at[r] < 0) bad_at[r] = std::int64_t(c);
          continue;
        }
        x[r * padded + c] = v;
        sum2 += double(v) * double(v);
        m = std::max(m, std::fabs(v));
      }
      row_max[r] = m;
      rms[r] = std::max(float(std::sqrt(sum2 / double(padded))), kMinRms);
      for (std::size_t c = 0; c < padded; ++c) normalized[r * padded + c] = x[r * padded + c] / rms[r];
    }
  });
  for (std::uint32_t r = 0; r < rows; ++r) {
    if (bad_at[r] >= 0) {
      return invalid(name, "non-finite weight at row " + std::to_string(r) + ", column " + std::to_string(bad_at[r]));
    }
  }
  const float max_abs = *std::max_element(row_max.begin(), row_max.end());

  int prob_bits = o.prob_bits ? o.prob_bits : model::initial_prob_bits(target);
  const bool auto_bits = o.prob_bits == 0;
  const std::uint32_t tile_symbols = o.tile_symbols ? o.tile_symbols : model::default_tile_symbols(target);
  lattice::QuantizedFields q;
  std::vector<float> scales;
  std::vector<double> row_sse;
  double scale = 1.0;
  bool coarsened = false;
  EcvqReport ecvq_report;

  if (max_abs == 0.0f) {
    quantize_all(normalized.data(), vectors, 1.0f, q, threads);
    refit_rows(x.data(), rows, padded, q, 1.0, rms.data(), scales, nullptr, threads);
  } else {
    const std::vector<std::uint32_t> sample = sample_rows(rows, padded, o.search_max_vectors);
    std::vector<float> sample_x;
    const float* sample_ptr = normalized.data();
    if (sample.size() < rows) {
      sample_x.resize(sample.size() * padded);
      for (std::size_t i = 0; i < sample.size(); ++i) {
        std::memcpy(&sample_x[i * padded], &normalized[std::size_t(sample[i]) * padded], padded * sizeof(float));
      }
      sample_ptr = sample_x.data();
    }
    for (;;) {
      bool escalate = false;
      scale = bisect_scale(sample_ptr, sample.size(), padded, target, prob_bits, tile_symbols, o.search_iterations,
                           threads);
      Calibration cal;
      // Whole-tensor corrections left: the sample misjudges heavy tails, and at high rates its frequency tables
      // weigh more than the whole tensor's do, so the sample's scale can miss by a percent.
      int full_checks = (!o.calibrate_rate || sample.size() == rows) ? 0 : 2;
      // ECVQ lowers the rate at a given scale (the sample's search never saw it), and the fine step asks for more.
      if (o.calibrate_rate && (o.ecvq || o.fine_rate)) full_checks = 8;
      const double tolerance = o.fine_rate ? 0.0003 : 0.002;
      // ECVQ can start far below the target (at low rates it drops a third of the bits at the sample's scale).
      const double max_step = o.ecvq ? 0.4 : 0.2;
      double prev_log_scale = 0.0;
      double prev_bpp = 0.0;
      bool have_prev = false;
      if (o.calibrate_rate) {
        cal = calibrate_scale(sample_ptr, sample.size(), padded, cols, target, prob_bits, tile_symbols, scale,
                              threads);
        scale = cal.scale;
      }
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
        quantize_all(normalized.data(), vectors, float(scale), q, threads);
        if (o.ecvq && !ecvq_after_rdo) {
          choose_points(normalized.data(), rms.data(), rows, padded, float(scale), q, eo, &ecvq_report);
        }
        const model::FieldCounts counts = count_fields_parallel(q, threads);
        std::uint32_t alpha = model::max_alphabet(counts);
        if (alpha <= table_size && full_checks > 0 && !ecvq_after_rdo) {
          --full_checks;
          if (retarget(counts)) continue;
        }
        if (alpha <= table_size) {
          refit_rows(x.data(), rows, padded, q, scale, rms.data(), scales, &row_sse, threads);
          if (o.rdo_sweeps > 0) {
            RdoProblem p;
            p.x = x.data();
            p.normalized = normalized.data();
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
            optimize_rows(p, q, scales, row_sse, &ratios);
            if (ecvq_after_rdo) {
              std::vector<float> row_scales(rows);
              for (std::uint32_t r = 0; r < rows; ++r) row_scales[r] = float(scale * ratios[r]);
              choose_points(normalized.data(), rms.data(), rows, padded, row_scales.data(), q, eo, &ecvq_report);
              refit_rows(x.data(), rows, padded, q, scale, rms.data(), scales, &row_sse, threads);
            }
            // RDO can widen an alphabet past what the baseline fitted.
            const model::FieldCounts after = model::count_fields(q.coset.data(), q.fields.data(), vectors);
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

  rans::EncodeGeometry g{rows, cols, std::uint32_t(prob_bits), tile_symbols, dtype};
  EPK_TRY_ASSIGN(rans::EncodedTensor out, rans::encode_fields(q, std::move(scales), g, threads));
  if (report) {
    report->scale = scale;
    report->prob_bits = prob_bits;
    report->coarsened = coarsened;
    report->estimated_bytes = model::estimate_stored_bytes(
        model::count_fields(q.coset.data(), q.fields.data(), vectors), rows, prob_bits, tile_symbols);
    report->max_abs_input = max_abs;
    report->ecvq_lambda = ecvq_report.lambda;
    report->ecvq_changed = ecvq_report.changed;
    report->pruned_entries = ecvq_report.pruned_entries;
  }
  return out;
}

}  // namespace epk::rate
