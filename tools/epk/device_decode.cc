#include "tools/epk/device_decode.h"

#ifdef EPK_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "codec/cuda/decode.h"
#endif

namespace epk::cli {

#ifdef EPK_HAVE_CUDA
namespace {

Error cuda_error(std::string_view name, const char* what, cudaError_t e) {
  return make_error(ErrorCode::kCuda, "tensor '" + std::string(name) + "': " + what + ": " + cudaGetErrorString(e));
}

// Device memory owned for the duration of one decode.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (p_) cudaFree(p_);
  }
  cudaError_t alloc(std::size_t bytes) { return cudaMalloc(&p_, bytes ? bytes : 16); }
  void* get() const { return p_; }

 private:
  void* p_ = nullptr;
};

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

template <class T>
cudaError_t upload_span(DeviceBuffer& b, std::span<const T> s, std::size_t extra = 0) {
  const std::size_t bytes = s.size_bytes();
  if (auto e = b.alloc(bytes + extra); e != cudaSuccess) return e;
  if (extra) cudaMemset(b.get(), 0, bytes + extra);
  return bytes ? cudaMemcpy(b.get(), s.data(), bytes, cudaMemcpyHostToDevice) : cudaSuccess;
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
  DeviceBuffer payload, offsets, states, scales, output, scratch;
  cudaError_t e;
  // The decoder reads the payload in 16-byte chunks, up to 8 words past its end.
  if ((e = upload_span(payload, s.payload, 32)) != cudaSuccess) return cuda_error(name, "payload", e);
  if ((e = upload_span(offsets, s.offsets)) != cudaSuccess) return cuda_error(name, "offsets", e);
  if ((e = upload_span(states, s.states)) != cudaSuccess) return cuda_error(name, "states", e);
  if ((e = upload_span(scales, s.scales)) != cudaSuccess) return cuda_error(name, "scales", e);
  if ((e = output.alloc(dst.size())) != cudaSuccess) return cuda_error(name, "output", e);
  cuda::DecodeJob job;
  job.name = std::string(name);
  job.stream = &s;
  job.dev = {static_cast<const std::uint16_t*>(payload.get()), static_cast<const std::uint32_t*>(offsets.get()),
             static_cast<const std::uint32_t*>(states.get()), static_cast<const float*>(scales.get())};
  job.row_begin = 0;
  job.row_end = s.rows;
  job.format = fmt;
  job.out_dev = output.get();
  EPK_TRY_ASSIGN(auto plan, cuda::DecodePlan::create(std::span<const cuda::DecodeJob>(&job, 1)));
  if ((e = scratch.alloc(plan.scratch_bytes())) != cudaSuccess) return cuda_error(name, "scratch", e);
  EPK_TRY(cuda::upload(plan, scratch.get(), plan.scratch_bytes(), nullptr));
  EPK_TRY(cuda::decode(plan, scratch.get(), nullptr));
  EPK_TRY_ASSIGN(auto bad, cuda::read_tile_faults(plan, scratch.get(), nullptr));
  if (faults)
    for (const auto& f : bad) faults->push_back({f.tile, std::string(cuda::tile_fault_name(f.fault))});
  EPK_TRY(cuda::read_status(plan, scratch.get(), nullptr));
  if ((e = cudaMemcpy(dst.data(), output.get(), dst.size(), cudaMemcpyDeviceToHost)) != cudaSuccess)
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
