#include "tools/epk/device_decode.h"

#ifdef EPK_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "codec/cuda/decode/decode.h"
#include "codec/cuda/device_allocation.h"
#include "codec/serve/device_plan.h"
#include "codec/serve/device_tier.h"
#endif

namespace epk::cli {

#ifdef EPK_HAVE_CUDA

Result<Device> choose_device(std::string_view name) {
  if (name == "cpu") return Device::kCpu;
  if (name != "cuda" && !name.empty())
    return make_error(ErrorCode::kInvalidArgument, "--device '" + std::string(name) + "': expected cpu or cuda");
  const int gpus = cuda::device_count();
  if (gpus > 0) return Device::kCuda;
  if (name.empty()) return Device::kCpu;
  return make_error(ErrorCode::kUnsupported, "--device cuda: no CUDA GPU is visible (driver missing or no device)");
}

Result<bool> gpu_decode(const serve::Producer& p, DType out, std::span<std::uint8_t> dst,
                        std::vector<rans::TileFaultRecord>* faults) {
  const std::string& name = p.entry().name;
  int device = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) {
    return make_error(ErrorCode::kCuda, "tensor '" + name + "': cudaGetDevice: " + cudaGetErrorString(e));
  }
  serve::DeviceTier tier(nullptr, {&p}, device, [](std::int64_t) {});
  if (!tier.holds(0)) return false;
  // Any dtype the decoder writes (the --dtype of the CLI, not only the serving layouts): the stored layout's format
  // for a source of that dtype.
  const std::optional<cuda::OutputFormat> format = serve::device_format(serve::Layout::kStored, out);
  if (!format) {
    return make_error(ErrorCode::kUnsupported,
                      "tensor '" + name + "': the GPU decoder does not write " + std::string(dtype_name(out)));
  }
  // On the legacy default stream: this process runs nothing else on the device.
  EPK_TRY_ASSIGN(cuda::DeviceAllocation region,
                 cuda::DeviceAllocation::create(tier.region_bytes(), device, "tensor '" + name + "': inputs"));
  EPK_TRY(tier.upload(region.address(), nullptr, [](std::size_t) { return Status{}; }, *format, nullptr));
  EPK_TRY_ASSIGN(cuda::DeviceAllocation output,
                 cuda::DeviceAllocation::create(dst.size(), device, "tensor '" + name + "': output"));
  EPK_TRY(tier.enqueue_format(0, *format, output.address(), dst.size(), nullptr));
  EPK_TRY(cuda::synchronize(nullptr, "tensor '" + name + "'"));
  std::vector<rans::TileFaultRecord> bad;
  Status checked = tier.check(nullptr, &bad);
  if (faults) faults->insert(faults->end(), bad.begin(), bad.end());
  EPK_TRY(checked);
  if (cudaError_t e = cudaMemcpy(dst.data(), output.address().as<const void>(), dst.size(),
                                 cudaMemcpyDeviceToHost);
      e != cudaSuccess) {
    return make_error(ErrorCode::kCuda, "tensor '" + name + "': copy back: " + cudaGetErrorString(e));
  }
  return true;
}

#else

Result<Device> choose_device(std::string_view name) {
  if (name == "cpu" || name.empty()) return Device::kCpu;
  if (name == "cuda")
    return make_error(ErrorCode::kUnsupported,
                      "--device cuda: this build of epk has no CUDA (no CUDA compiler was "
                      "found when it was configured)");
  return make_error(ErrorCode::kInvalidArgument, "--device '" + std::string(name) + "': expected cpu or cuda");
}

Result<bool> gpu_decode(const serve::Producer& p, DType, std::span<std::uint8_t>,
                        std::vector<rans::TileFaultRecord>*) {
  return make_error(ErrorCode::kUnsupported, "tensor '" + p.entry().name + "': this build of epk has no CUDA");
}

#endif

}  // namespace epk::cli
