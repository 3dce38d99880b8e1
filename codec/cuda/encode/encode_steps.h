// The device's rate::EncodeSteps: row statistics, the sample's and the tensor's quantisation and histograms, the
// refit sums and the tiled rANS coder run on one CUDA device, in one stream; the host keeps the control flow
// (rate::encode_with), the frequency tables (rans::build_tables on the device's histograms) and the small per-row
// arithmetic (refit's scale from the device's float64 sums), so every result equals the CPU steps'.
// Source dtypes: F32, BF16, F16 (supports()). No ECVQ / RDO arrays (host() is nullptr).
// Device memory: grow-only buffers reused from tensor to tensor; a tensor of W weights (V = W / 8 vectors, dtype of
// e bytes) needs 2 W e (its source and the prefetched next one's, at most the largest tensor's) + 33 V (fields) +
// 36 V (coder scratch and payload) + O(rows) bytes: about 6.3x the largest bf16 tensor's own size, plus the
// sample's (at most search_max_vectors + one row of vectors, 33 bytes each and their 8 source weights) and 4 MiB
// of histogram.
// The scale search runs on the sample's rows while the rest of the tensor is still being copied (encode_source.h).
// Not thread-safe: one tensor at a time.
#pragma once

#include <memory>
#include <optional>

#include "codec/common/dtype.h"
#include "codec/rate/choose.h"
#include "codec/rate/encode_steps.h"

namespace epk::cuda {

class DeviceSteps final : public rate::EncodeSteps {
 public:
  // Errors (kCuda): no device of that index, or a failing stream creation.
  static Result<std::unique_ptr<DeviceSteps>> create(int device);
  ~DeviceSteps() override;

  static bool supports(DType dtype);

  Result<rate::SampleStats> load(std::span<const std::byte> weights, std::uint32_t rows, std::uint32_t cols,
                                 DType dtype, const std::vector<std::uint32_t>& sample) override;
  Result<rate::SourceStats> source_stats() override;
  // The bytes of the tensor to be encoded after the one about to be loaded (empty: none): they are copied to the
  // device on a second stream from a helper thread once this one's have arrived, so that the copy overlaps its
  // steps, and the load() of exactly these bytes (same address and size) takes them. They must stay valid and
  // unchanged until then.
  void prefetch_next(std::span<const std::byte> next);
  // Waits for any copy still reading the loaded tensor's bytes (DeviceEncoder calls it before encode returns).
  void settle();
  model::FieldCounts sample_counts(float scale) override;
  Result<rate::SampleCoded> sample_code(float scale, std::uint32_t cols, int prob_bits,
                                        std::uint32_t tile_symbols) override;
  Status quantize(float scale) override;
  model::FieldCounts counts() override;
  Status refit(double scale, std::vector<float>& scales, std::vector<double>* row_sse) override;
  Result<rans::EncodedTensor> code(std::vector<float> scales, const rans::EncodeGeometry& g) override;
  rate::HostArrays* host() override { return nullptr; }
  Status fields_changed() override;

  // The last code()'s reconstruction against the source, summed per row on the device, rows in order on the host.
  const std::optional<rate::ReconstructionError>& last_error() const { return last_error_; }
  // The working fields (the last quantize()), copied to the host: for tests that compare steps.
  lattice::QuantizedFields download_fields();
  // Wall seconds spent in each step since creation (host clock around each call, device waits included).
  struct StepTimes {
    double load = 0, sample = 0, quantize = 0, counts = 0, refit = 0, code = 0, error = 0;
    double upload = 0;    // within load and source_stats: the sample's copy, the wait for the tensor's
    double download = 0;  // within code and sample: the payload's and states' copy to the host
    std::uint64_t calls_sample = 0, calls_quantize = 0;
  };
  const StepTimes& times() const { return times_; }
  // The first CUDA error met by a step that cannot return one (sample_counts, counts); cleared by load().
  const Status& sticky() const { return sticky_; }

  struct Impl;

 private:
  explicit DeviceSteps(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::optional<rate::ReconstructionError> last_error_;
  StepTimes times_;
  Status sticky_;
};

}  // namespace epk::cuda
