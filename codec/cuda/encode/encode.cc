#include "codec/cuda/encode/encode.h"

#include <cuda_runtime_api.h>

#include "codec/cuda/encode/encode_steps.h"
#include "codec/rate/encode_steps.h"

namespace epk::cuda {

int encoder_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

DeviceEncoder::DeviceEncoder(std::unique_ptr<DeviceSteps> steps) : steps_(std::move(steps)) {}
DeviceEncoder::~DeviceEncoder() = default;

Result<std::unique_ptr<DeviceEncoder>> DeviceEncoder::create(int device) {
  const int n = encoder_device_count();
  if (device < 0 || device >= n) {
    return make_error(ErrorCode::kCuda, "device encoder: no CUDA device " + std::to_string(device) + " (" +
                                            std::to_string(n) + " visible)");
  }
  EPK_TRY_ASSIGN(auto steps, DeviceSteps::create(device));
  return std::unique_ptr<DeviceEncoder>(new DeviceEncoder(std::move(steps)));
}

void DeviceEncoder::prefetch_next(std::span<const std::byte> next) { steps_->prefetch_next(next); }

bool DeviceEncoder::runs_on_device(DType dtype, const rate::EncodeOptions& o) {
  return DeviceSteps::supports(dtype) && !o.ecvq && o.rdo_sweeps == 0 && !o.calibration;
}

Result<rans::EncodedTensor> DeviceEncoder::encode(std::span<const std::byte> weights, std::uint32_t rows,
                                                  std::uint32_t cols, DType dtype, const rate::EncodeOptions& options,
                                                  std::string_view name, rate::EncodeReport* report,
                                                  std::optional<rate::ReconstructionError>* error) {
  if (error) error->reset();
  if (!runs_on_device(dtype, options)) return rate::encode(weights, rows, cols, dtype, options, name, report);
  auto out = rate::encode_with(*steps_, weights, rows, cols, dtype, options, name, report);
  steps_->settle();  // nothing reads weights once encode returns, whatever ended it
  if (!out) return out;
  if (error) *error = steps_->last_error();
  return out;
}

}  // namespace epk::cuda
