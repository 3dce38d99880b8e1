// The device encoder (`epk compress --device cuda`): rate::encode's control flow on the host (rate::encode_with),
// its heavy steps on one CUDA device (encode_steps.h), so the stream is the CPU encoder's byte for byte for the same
// options. What the device does not run goes to the CPU encoder, stated here so that nobody is surprised: source
// dtypes other than F32 / BF16 / F16, and ECVQ / row RDO (`--rdo`, which needs the host's arrays for its per-row
// searches), and calibrated tensors (options.calibration: the feedback rounding runs on the CPU). The reconstruction error pack_tensor needs is measured on the device from the coded fields (no host
// decode). One tensor at a time; not thread-safe.
#pragma once

#include <memory>
#include <optional>

#include "codec/common/result.h"
#include "codec/rate/choose.h"

namespace epk::cuda {

// The number of CUDA devices visible (0 without a driver or device).
int encoder_device_count();

class DeviceSteps;

class DeviceEncoder final : public rate::TensorEncoder {
 public:
  // Errors (kCuda): no such device.
  static Result<std::unique_ptr<DeviceEncoder>> create(int device = 0);
  ~DeviceEncoder() override;

  // Whether a tensor of this dtype under these options is encoded on the device (else by rate::encode).
  static bool runs_on_device(DType dtype, const rate::EncodeOptions& options);

  Result<rans::EncodedTensor> encode(std::span<const std::byte> weights, std::uint32_t rows, std::uint32_t cols,
                                     DType dtype, const rate::EncodeOptions& options, std::string_view name,
                                     rate::EncodeReport* report,
                                     std::optional<rate::ReconstructionError>* error) override;

  void prefetch_next(std::span<const std::byte> next) override;

  // The steps behind it (their timings, for benches).
  const DeviceSteps& steps() const { return *steps_; }

 private:
  explicit DeviceEncoder(std::unique_ptr<DeviceSteps> steps);
  std::unique_ptr<DeviceSteps> steps_;
};

}  // namespace epk::cuda
