#include "tools/epk/device_decode.h"

#ifdef EPK_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "codec/cuda/decode.h"
#include "codec/cuda/device_memory.h"
#include "codec/cuda/tier_layout.h"
#include "codec/serve/device_plan.h"
#endif

namespace epk::cli {

#ifdef EPK_HAVE_CUDA
namespace {

Error cuda_error(std::string_view name, const char* what, cudaError_t e) {
  return make_error(ErrorCode::kCuda, "tensor '" + std::string(name) + "': " + what + ": " + cudaGetErrorString(e));
}

bool output_format(DType t, cuda::OutputFormat* f) {
  switch (t) {
    case DType::kBF16:
      *f = cuda::OutputFormat::kBf16;
      return true;
    case DType::kF16:
      *f = cuda::OutputFormat::kFp16;
      return true;
    case DType::kF32:
      *f = cuda::OutputFormat::kFp32;
      return true;
    case DType::kF8E4M3:
      *f = cuda::OutputFormat::kFp8E4M3;
      return true;
    case DType::kF8E5M2:
      *f = cuda::OutputFormat::kFp8E5M2;
      return true;
    default:
      return false;
  }
}

}  // namespace

Result<Device> choose_device(std::string_view name) {
  if (name == "cpu") return Device::kCpu;
  if (name != "cuda" && !name.empty())
    return make_error(ErrorCode::kInvalidArgument, "--device '" + std::string(name) + "': expected cpu or cuda");
  const int gpus = cuda::device_count();
  if (gpus > 0) return Device::kCuda;
  if (name.empty()) return Device::kCpu;
  return make_error(ErrorCode::kUnsupported, "--device cuda: no CUDA GPU is visible (driver missing or no device)");
}

Status gpu_decode(const rans::LatticeRansStream& s, std::string_view name, DType out, std::span<std::uint8_t> dst,
                  std::vector<GpuTileFault>* faults) {
  cuda::OutputFormat fmt;
  if (!output_format(out, &fmt))
    return make_error(ErrorCode::kUnsupported, "tensor '" + std::string(name) + "': the GPU decoder does not write " +
                                                   std::string(dtype_name(out)));
  // The stored buffers in one region at the serving layer's places (the decoder reads the payload past its end:
  // tier_layout pads it), then the serving layer's plan for the format, on the legacy default stream.
  const rans::LatticeRansStream* views[1] = {&s};
  const cuda::TierLayout at = cuda::tier_layout(views);
  cuda::DeviceBuffer inputs, output, scratch;
  cudaError_t e;
  if ((e = inputs.reserve(at.bytes)) != cudaSuccess) return cuda_error(name, "inputs", e);
  if ((e = cudaMemset(inputs.as<void>(), 0, at.bytes)) != cudaSuccess) return cuda_error(name, "inputs", e);
  for (const serve::Upload& u : serve::lattice_uploads(s, *at.tensors[0])) {
    if (u.host.empty()) continue;
    if ((e = cudaMemcpy(static_cast<std::uint8_t*>(inputs.as<void>()) + u.offset, u.host.data(), u.host.size(),
                        cudaMemcpyHostToDevice)) != cudaSuccess) {
      return cuda_error(name, "upload", e);
    }
  }
  int device = 0;
  if ((e = cudaGetDevice(&device)) != cudaSuccess) return cuda_error(name, "device", e);
  EPK_TRY_ASSIGN(auto plan, serve::LatticeDevicePlan::create(
                                s, name, fmt,
                                cuda::tier_buffers(reinterpret_cast<std::uint64_t>(inputs.as<void>()), *at.tensors[0]),
                                device));
  if (plan.output_bytes() != dst.size()) {
    return make_error(ErrorCode::kInvalidArgument, "tensor '" + std::string(name) + "': output of " +
                                                       std::to_string(dst.size()) + " bytes, the decode writes " +
                                                       std::to_string(plan.output_bytes()));
  }
  if ((e = output.reserve(dst.size())) != cudaSuccess) return cuda_error(name, "output", e);
  if ((e = scratch.reserve(plan.scratch_bytes())) != cudaSuccess) return cuda_error(name, "scratch", e);
  EPK_TRY(plan.upload(scratch.as<void>(), nullptr));
  EPK_TRY(plan.enqueue(reinterpret_cast<std::uint64_t>(output.as<void>()), scratch.as<void>(), nullptr));
  EPK_TRY_ASSIGN(auto bad, cuda::read_tile_faults(plan.decode_plan(), scratch.as<void>(), nullptr));
  if (faults)
    for (const auto& f : bad) faults->push_back({f.tile, std::string(cuda::tile_fault_name(f.fault))});
  EPK_TRY(plan.check(scratch.as<void>(), nullptr));
  if ((e = cudaMemcpy(dst.data(), output.as<void>(), dst.size(), cudaMemcpyDeviceToHost)) != cudaSuccess)
    return cuda_error(name, "copy back", e);
  return {};
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

Status gpu_decode(const rans::LatticeRansStream&, std::string_view name, DType, std::span<std::uint8_t>,
                  std::vector<GpuTileFault>*) {
  return make_error(ErrorCode::kUnsupported, "tensor '" + std::string(name) + "': this build of epk has no CUDA");
}

#endif

}  // namespace epk::cli
