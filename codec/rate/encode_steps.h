// The heavy steps of rate::encode behind one interface, so that a device (codec/cuda/encode/encode.h) runs them while
// encode_with keeps the encoder's control flow (the scale search, calibration, whole-tensor retargeting, prob_bits
// escalation, coarsening) in one place. A backend gives exactly the results of the CPU functions named below; then
// the stream is the CPU encoder's, byte for byte.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "codec/common/dtype.h"
#include "codec/common/result.h"
#include "codec/lattice/quantize.h"
#include "codec/model/tables.h"
#include "codec/rans/encoded_tensor.h"
#include "codec/rans/encoder.h"
#include "codec/rate/encode.h"
#include "codec/rate/search.h"

namespace epk::rate {

// Row statistics of the source (encode.cc's first pass): rms[r] = max(float(sqrt(sum x^2 / padded)), 1e-12) with the
// sum in float64 over the row in column order, the largest |x| and the first non-finite element, if any.
struct SourceStats {
  std::vector<float> rms;
  float max_abs = 0.0f;
  std::int64_t bad_row = -1;  // first row (lowest) holding a non-finite value, its lowest such column
  std::int64_t bad_col = -1;
};

// What the scale search needs to know of its sample's rows before the whole source's statistics are in.
struct SampleStats {
  bool finite = true;    // no non-finite value in the sample's rows
  float max_abs = 0.0f;  // their largest |x|
};

// The host arrays ECVQ and row RDO work on (x zero-padded, normalized = x / rms, q the current fields).
struct HostArrays {
  const float* x = nullptr;
  const float* normalized = nullptr;
  lattice::QuantizedFields* q = nullptr;
};

class EncodeSteps {
 public:
  virtual ~EncodeSteps() = default;
  // Takes the source (rows x cols of dtype) and the rows of the scale search (sample_rows' choice). The sample's
  // operations (sample_counts, sample_code) may be called from here on; the other steps after source_stats(). A
  // backend may still be bringing the rest of the source in while the sample's operations run.
  virtual Result<SampleStats> load(std::span<const std::byte> weights, std::uint32_t rows, std::uint32_t cols,
                                   DType dtype, const std::vector<std::uint32_t>& sample) = 0;
  // The whole source's row statistics.
  virtual Result<SourceStats> source_stats() = 0;
  virtual model::FieldCounts sample_counts(float scale) = 0;      // quantize_counts on the sample
  virtual Result<SampleCoded> sample_code(float scale, std::uint32_t cols, int prob_bits,
                                          std::uint32_t tile_symbols) = 0;  // calibrate_scale's coded sample
  // quantize_all of the whole normalised tensor at scale into the working fields.
  virtual Status quantize(float scale) = 0;
  virtual model::FieldCounts counts() = 0;  // count_fields of the working fields
  // refit_rows of the working fields; row_sse as refit_rows fills it.
  virtual Status refit(double scale, std::vector<float>& scales, std::vector<double>* row_sse) = 0;
  // encode_fields of the working fields.
  virtual Result<rans::EncodedTensor> code(std::vector<float> scales, const rans::EncodeGeometry& g) = 0;
  // The host arrays for ECVQ and RDO, or nullptr where the backend keeps none (encode_with then refuses options
  // that need them). After host code changes q, fields_changed() hands the fields back to the backend.
  virtual HostArrays* host() = 0;
  virtual Status fields_changed() = 0;
  // Called before load() when the options carry statistics: from then on quantisation rounds with error feedback
  // and refit fits the H-weighted objective (codec/rate/feedback.h). A backend without that refuses.
  virtual Status set_calibration(const HessianView& h, std::string_view name) {
    (void)h;
    return make_error(ErrorCode::kUnsupported,
                      "tensor '" + std::string(name) + "': this encoder backend has no calibrated rounding");
  }
};

// kInvalidArgument naming the first of sample's rows that is not below rows (a backend's load() checks its sample).
Status check_sample_rows(const std::vector<std::uint32_t>& sample, std::uint32_t rows);

// The CPU steps (the functions of codec/lattice, codec/model, codec/rate and codec/rans on `threads` threads).
std::unique_ptr<EncodeSteps> make_cpu_steps(int threads);

// rate::encode on the given steps (encode() is encode_with on the CPU steps).
Result<rans::EncodedTensor> encode_with(EncodeSteps& steps, std::span<const std::byte> weights, std::uint32_t rows,
                                        std::uint32_t cols, DType dtype, const EncodeOptions& options,
                                        std::string_view name = "tensor", EncodeReport* report = nullptr);

}  // namespace epk::rate
