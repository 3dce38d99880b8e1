// Launch side of the fused decoder: instantiates the kernels (the lean kernel at prob_bits 11 and the general one for
// each table placement, each in its block shapes), uploads plans, launches, and reads back the status.
#include <cuda_runtime.h>

#include <string>

#include "codec/cuda/decode/decode.h"
#include "codec/cuda/decode/decode_kernel.cuh"
#include "codec/cuda/decode/decode_launch.h"
#include "codec/cuda/decode/decode_lean.cuh"

namespace epk::cuda {
namespace {

Error cuda_error(const char* what, cudaError_t err) {
  return make_error(ErrorCode::kCuda, std::string(what) + ": " + cudaGetErrorName(err) + " (" +
                                          cudaGetErrorString(err) + ")");
}

using KernelFn = void (*)(std::uint8_t*, std::uint64_t, std::uint64_t, std::uint64_t, std::uint64_t);
using detail::Block24;
using detail::Block32;

// The lean kernels exist for detail::kLeanProbBits only (the plan takes them for nothing else).
KernelFn lean_kernel(bool bf16, int warps) {
  using detail::lattice_decode_lean_kernel;
  using detail::LeanPolicy;
  constexpr int kPb = detail::kLeanProbBits;
  if (warps <= Block24::kMaxWarps) {
    return bf16 ? lattice_decode_lean_kernel<LeanPolicy<kPb, true, Block24>>
                : lattice_decode_lean_kernel<LeanPolicy<kPb, false, Block24>>;
  }
  return bf16 ? lattice_decode_lean_kernel<LeanPolicy<kPb, true, Block32>>
              : lattice_decode_lean_kernel<LeanPolicy<kPb, false, Block32>>;
}

// The shared placements serve real tensors (8 bpp, and everything the lean loop does not take) and have both block
// shapes; the global one serves only streams that no shared table holds, in the 32-warp shape alone.
KernelFn general_kernel(int lut_mode, int warps) {
  using detail::GeneralPolicy;
  using detail::lattice_decode_kernel;
  const bool narrow = warps <= Block24::kMaxWarps;
  switch (lut_mode) {
    case detail::kPackedShared:
      return narrow ? lattice_decode_kernel<GeneralPolicy<detail::kPackedShared, Block24>>
                    : lattice_decode_kernel<GeneralPolicy<detail::kPackedShared, Block32>>;
    case detail::kTwoLevelShared:
      return narrow ? lattice_decode_kernel<GeneralPolicy<detail::kTwoLevelShared, Block24>>
                    : lattice_decode_kernel<GeneralPolicy<detail::kTwoLevelShared, Block32>>;
    default: return lattice_decode_kernel<GeneralPolicy<detail::kWideGlobal, Block32>>;
  }
}

KernelFn kernel_for(const detail::KernelChoice& k) {
  if (k.lean_pb != 0) return lean_kernel(k.lean_bf16, k.warps);
  return general_kernel(k.lut_mode, k.warps);
}

detail::KernelChoice kernel_of(const DecodePlan& plan) {
  return {plan.lut_mode(), plan.lean_pb(), plan.lean_bf16(), static_cast<int>(plan.warps_per_block())};
}

}  // namespace

namespace detail {

Result<DeviceLimits> query_limits(int device) {
  if (device < 0) {
    if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return cuda_error("cudaGetDevice", e);
  }
  DeviceLimits limits;
  int v = 0;
  if (cudaError_t e = cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, device); e != cudaSuccess) {
    return cuda_error("cudaDeviceGetAttribute(multiprocessors)", e);
  }
  limits.sms = v;
  if (cudaError_t e = cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, device); e != cudaSuccess) {
    return cuda_error("cudaDeviceGetAttribute(shared per block)", e);
  }
  limits.max_shared_per_block = static_cast<std::size_t>(v);
  if (cudaError_t e = cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
      e != cudaSuccess) {
    return cuda_error("cudaDeviceGetAttribute(shared per SM)", e);
  }
  limits.max_shared_per_sm = static_cast<std::size_t>(v);
  return limits;
}

Result<int> blocks_per_sm(const KernelChoice& kernel, std::size_t dynamic_shared) {
  KernelFn fn = kernel_for(kernel);
  // Raise the dynamic limit to the device maximum (not to this plan's need) so plans of different sizes coexist.
  cudaFuncAttributes attrs{};
  if (cudaError_t e = cudaFuncGetAttributes(&attrs, fn); e != cudaSuccess) {
    return cuda_error("cudaFuncGetAttributes", e);
  }
  int device = 0, optin = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return cuda_error("cudaGetDevice", e);
  if (cudaError_t e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
      e != cudaSuccess) {
    return cuda_error("cudaDeviceGetAttribute(shared per block)", e);
  }
  if (dynamic_shared + attrs.sharedSizeBytes > static_cast<std::size_t>(optin)) return 0;
  if (cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           optin - static_cast<int>(attrs.sharedSizeBytes));
      e != cudaSuccess) {
    return cuda_error("cudaFuncSetAttribute(max dynamic shared memory)", e);
  }
  int blocks = 0;
  if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, fn, kernel.warps * 32, dynamic_shared);
      e != cudaSuccess) {
    return cuda_error("cudaOccupancyMaxActiveBlocksPerMultiprocessor", e);
  }
  return blocks;
}

}  // namespace detail

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

Status upload(const DecodePlan& plan, void* scratch_dev, std::size_t scratch_bytes, Stream stream) {
  if (scratch_dev == nullptr || scratch_bytes < plan.scratch_bytes()) {
    return make_error(ErrorCode::kInvalidArgument, "decode upload: scratch of " + std::to_string(scratch_bytes) +
                                                       " bytes, the plan needs " +
                                                       std::to_string(plan.scratch_bytes()));
  }
  if (reinterpret_cast<std::uintptr_t>(scratch_dev) % 256 != 0) {
    return make_error(ErrorCode::kInvalidArgument, "decode upload: scratch must be 256-byte aligned");
  }
  const auto& image = plan.image();
  if (cudaError_t e = cudaMemcpyAsync(scratch_dev, image.data(), image.size(), cudaMemcpyHostToDevice, stream);
      e != cudaSuccess) {
    return cuda_error("decode upload: cudaMemcpyAsync", e);
  }
  // The image is pageable host memory owned by the plan: wait so the plan may be moved or freed afterwards.
  if (cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) {
    return cuda_error("decode upload: cudaStreamSynchronize", e);
  }
  return {};
}

Status decode(const DecodePlan& plan, void* scratch_dev, Stream stream) {
  if (plan.blocks() == 0) return {};
  auto* scratch = static_cast<std::uint8_t*>(scratch_dev);
  if (cudaError_t e = cudaMemsetAsync(scratch + plan.status_offset(), 0, sizeof(DecodeStatus), stream);
      e != cudaSuccess) {
    return cuda_error("decode: cudaMemsetAsync(status)", e);
  }
  KernelFn fn = kernel_for(kernel_of(plan));
  const dim3 grid(static_cast<unsigned>(plan.blocks()));
  const dim3 block(plan.warps_per_block() * 32);
  fn<<<grid, block, plan.shared_bytes_per_block(), stream>>>(scratch, plan.descs_offset(), plan.items_offset(),
                                                             plan.status_offset(), plan.tile_status_offset());
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return cuda_error("decode: kernel launch", e);
  return {};
}

Status read_status(const DecodePlan& plan, const void* scratch_dev, Stream stream) {
  DecodeStatus st;
  const auto* scratch = static_cast<const std::uint8_t*>(scratch_dev);
  if (cudaError_t e = cudaMemcpyAsync(&st, scratch + plan.status_offset(), sizeof(st), cudaMemcpyDeviceToHost, stream);
      e != cudaSuccess) {
    return cuda_error("decode status: cudaMemcpyAsync", e);
  }
  if (cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) {
    return cuda_error("decode status: cudaStreamSynchronize", e);
  }
  if (st.bad_tiles == 0) return {};
  const std::uint64_t key = ~st.first_bad_inverted;
  const auto tensor = static_cast<std::uint32_t>(key >> 32);
  const auto tile = static_cast<std::uint32_t>(key);
  std::string name = tensor < plan.tensors() ? plan.job_name(tensor) : "?";
  std::string fault = "?";
  if (auto faults = read_tile_faults(plan, scratch_dev, stream)) {
    for (const rans::TileFaultRecord& f : *faults) {
      if (f.tensor == tensor && f.tile == tile) fault = std::string(rans::tile_fault_name(f.fault));
    }
  }
  return make_error(ErrorCode::kCorruptTile, "tensor '" + name + "': tile " + std::to_string(tile) + " is corrupt (" +
                                                 fault + "); " + std::to_string(st.bad_tiles) +
                                                 " corrupt tile(s) in the batch");
}

Result<std::vector<rans::TileFaultRecord>> read_tile_faults(const DecodePlan& plan, const void* scratch_dev,
                                                            Stream stream) {
  std::vector<std::uint8_t> codes(plan.tiles());
  const auto* scratch = static_cast<const std::uint8_t*>(scratch_dev);
  if (!codes.empty()) {
    if (cudaError_t e = cudaMemcpyAsync(codes.data(), scratch + plan.tile_status_offset(), codes.size(),
                                        cudaMemcpyDeviceToHost, stream);
        e != cudaSuccess) {
      return cuda_error("decode tile status: cudaMemcpyAsync", e);
    }
  }
  if (cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) {
    return cuda_error("decode tile status: cudaStreamSynchronize", e);
  }
  std::vector<rans::TileFaultRecord> out;
  for (std::size_t t = 0; t < plan.tensors(); ++t) {
    const std::uint32_t base = plan.tile_base(t);
    const std::uint32_t end = t + 1 < plan.tensors() ? plan.tile_base(t + 1) : static_cast<std::uint32_t>(codes.size());
    for (std::uint32_t i = base; i < end; ++i) {
      if (codes[i] != 0) {
        out.push_back(
            {static_cast<std::uint32_t>(t), plan.first_tile(t) + (i - base), static_cast<rans::TileFault>(codes[i])});
      }
    }
  }
  return out;
}

}  // namespace epk::cuda
