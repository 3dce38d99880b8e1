#include "codec/serve/device_plan.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstring>
#include <string>

#include "codec/cuda/decode/decode_desc.h"

namespace epk::serve {
namespace {

constexpr std::size_t kPatchAt = 0, kStatusAt = 16, kPinnedBytes = 32;
static_assert(sizeof(cuda::DecodeStatus) == kPinnedBytes - kStatusAt);
// enqueue() writes both output addresses with one 16-byte copy.
static_assert(offsetof(cuda::detail::TensorDesc, row_scales) ==
              offsetof(cuda::detail::TensorDesc, out) + sizeof(void*));

Error cuda_error(std::string_view name, const char* what, cudaError_t e) {
  return make_error(ErrorCode::kCuda, "tensor '" + std::string(name) + "': " + what + ": " + cudaGetErrorName(e) +
                                          " (" + cudaGetErrorString(e) + ")");
}

template <class T>
std::span<const std::byte> bytes_of(std::span<const T> s) {
  return std::as_bytes(s);
}

}  // namespace

std::optional<cuda::OutputFormat> device_format(Layout layout, DType source) {
  switch (layout) {
    case Layout::kStored:
      switch (source) {
        case DType::kBF16: return cuda::OutputFormat::kBf16;
        case DType::kF16: return cuda::OutputFormat::kFp16;
        case DType::kF32: return cuda::OutputFormat::kFp32;
        case DType::kF8E4M3: return cuda::OutputFormat::kFp8E4M3;
        case DType::kF8E5M2: return cuda::OutputFormat::kFp8E5M2;
        default: return std::nullopt;
      }
    case Layout::kDenseBF16: return cuda::OutputFormat::kBf16;
    case Layout::kDenseF16: return cuda::OutputFormat::kFp16;
    case Layout::kDenseF32: return cuda::OutputFormat::kFp32;
    case Layout::kRowwiseI8: return cuda::OutputFormat::kInt8Rowwise;
    case Layout::kRowwiseF8E4M3: return cuda::OutputFormat::kFp8E4M3Rowwise;
    default: return std::nullopt;
  }
}

std::uint64_t device_output_bytes(cuda::OutputFormat format, std::uint64_t rows, std::uint64_t cols) {
  if (cuda::is_rowwise(format)) return rowwise_scales_offset(rows, cols) + rows * 4;
  return rows * cols * cuda::output_element_bytes(format);
}

std::array<Upload, 4> lattice_uploads(const rans::LatticeRansStream& s, const cuda::TierPlacement& at) {
  return {Upload{bytes_of(s.payload), at.payload}, Upload{bytes_of(s.offsets), at.offsets},
          Upload{bytes_of(s.states), at.states}, Upload{bytes_of(s.scales), at.scales}};
}

Result<LatticeJob> lattice_job(const LatticeRansProducer& p, Layout layout, const cuda::DeviceBuffers& inputs,
                               DeviceAddress out_dev) {
  const std::optional<cuda::OutputFormat> format = device_format(layout, p.source_dtype());
  if (!format) {
    return make_error(ErrorCode::kUnsupported, p.origin() + ": tensor '" + p.entry().name +
                                                   "': the GPU decoder does not write layout " +
                                                   std::string(layout_name(layout)));
  }
  const rans::LatticeRansStream& s = p.stream();
  LatticeJob out;
  out.job.name = p.entry().name;
  out.job.stream = &s;
  out.job.dev = inputs;
  out.job.row_begin = 0;
  out.job.row_end = s.rows;
  out.job.format = *format;
  out.job.out_dev = out_dev.as<void>();
  out.bytes = device_output_bytes(*format, s.rows, s.cols);
  if (cuda::is_rowwise(*format)) {
    const std::uint64_t values = std::uint64_t{s.rows} * s.cols, at = rowwise_scales_offset(s.rows, s.cols);
    out.job.row_scales_dev = (out_dev + at).as<float>();
    out.gap_at = out_dev + values;
    out.gap_bytes = at - values;
  }
  return out;
}

void LatticeDevicePlan::PinnedFree::operator()(void* p) const {
  if (p != nullptr) (void)cudaFreeHost(p);
}

Result<LatticeDevicePlan> LatticeDevicePlan::create(const rans::LatticeRansStream& s, std::string_view name,
                                                    cuda::OutputFormat format, std::uint32_t row_begin,
                                                    std::uint32_t row_end, const cuda::DeviceBuffers& inputs,
                                                    int device) {
  if (row_begin >= row_end || row_end > s.rows) {
    return make_error(ErrorCode::kInvalidArgument, "tensor '" + std::string(name) + "': rows [" +
                                                       std::to_string(row_begin) + ", " + std::to_string(row_end) +
                                                       ") of " + std::to_string(s.rows));
  }
  LatticeDevicePlan out;
  out.format_ = format;
  out.row_begin_ = row_begin;
  out.row_end_ = row_end;
  out.rows_ = s.rows;
  out.cols_ = s.cols;
  void* pinned = nullptr;
  if (cudaError_t e = cudaHostAlloc(&pinned, kPinnedBytes, cudaHostAllocPortable); e != cudaSuccess) {
    return cuda_error(name, "cudaHostAlloc", e);
  }
  out.pinned_.reset(static_cast<std::uint8_t*>(pinned));
  std::memset(pinned, 0, kPinnedBytes);
  cuda::DecodeJob job;
  job.name = std::string(name);
  job.stream = &s;
  job.dev = inputs;
  job.row_begin = row_begin;
  job.row_end = row_end;
  job.format = format;
  // Placeholders, replaced by every enqueue(): the planner wants valid, 16-byte aligned addresses. The inputs' own
  // payload address is one (never written: enqueue() points the descriptor at dst before the kernel runs).
  job.out_dev = const_cast<std::uint16_t*>(inputs.payload_dev);
  job.row_scales_dev = cuda::is_rowwise(format) ? reinterpret_cast<float*>(job.out_dev) : nullptr;
  cuda::DecodeOptions options;
  options.device = device;
  EPK_TRY_ASSIGN(out.plan_, cuda::DecodePlan::create(std::span<const cuda::DecodeJob>(&job, 1), options));
  return out;
}

Status LatticeDevicePlan::upload(void* scratch_dev, cuda::Stream stream) const {
  return cuda::upload(plan_, scratch_dev, plan_.scratch_bytes(), stream);
}

Status LatticeDevicePlan::enqueue(DeviceAddress dst, void* scratch_dev, cuda::Stream stream) {
  const std::string& name = plan_.job_name(0);
  const std::uint64_t rows = row_end_ - row_begin_;
  DeviceAddress scales_dst;
  if (cuda::is_rowwise(format_)) {
    const std::uint64_t values = rows * cols_, at = rowwise_scales_offset(rows, cols_);
    scales_dst = dst + at;
    // The gap between values and scales: zeros, as the host producer leaves it.
    if (at > values) {
      if (cudaError_t e = cudaMemsetAsync((dst + values).as<void>(), 0, at - values, stream);
          e != cudaSuccess) {
        return cuda_error(name, "rowwise gap: cudaMemsetAsync", e);
      }
    }
  }
  const std::uint64_t patch[2] = {dst.value, scales_dst.value};
  std::memcpy(pinned_.get() + kPatchAt, patch, sizeof(patch));
  auto* scratch = static_cast<std::uint8_t*>(scratch_dev);
  void* desc_out = scratch + plan_.descs_offset() + offsetof(cuda::detail::TensorDesc, out);
  if (cudaError_t e = cudaMemcpyAsync(desc_out, pinned_.get() + kPatchAt, sizeof(patch), cudaMemcpyHostToDevice,
                                      stream);
      e != cudaSuccess) {
    return cuda_error(name, "output address: cudaMemcpyAsync", e);
  }
  EPK_TRY(cuda::decode(plan_, scratch_dev, stream));
  // The status comes back on the stream, so the caller's one synchronisation covers the decode and its status.
  if (cudaError_t e = cudaMemcpyAsync(pinned_.get() + kStatusAt, scratch + plan_.status_offset(),
                                      sizeof(cuda::DecodeStatus), cudaMemcpyDeviceToHost, stream);
      e != cudaSuccess) {
    return cuda_error(name, "decode status: cudaMemcpyAsync", e);
  }
  return {};
}

std::uint64_t LatticeDevicePlan::column_shard_bytes(cuda::OutputFormat format, std::uint64_t rows,
                                                    const ShardRange& cols) {
  return device_output_bytes(format, rows, cols.extent());
}

Status LatticeDevicePlan::enqueue_columns(const ShardRange& cols, DeviceAddress dst, std::uint64_t dst_bytes,
                                          DeviceAddress work_dev, void* scratch_dev, cuda::Stream stream) {
  const std::string& name = plan_.job_name(0);
  const std::uint64_t rows = rows_;
  const bool rowwise = cuda::is_rowwise(format_);
  const std::uint64_t elem = rowwise ? 1 : cuda::output_element_bytes(format_);
  const std::uint64_t width = cols.extent() * elem;
  const std::uint64_t at = rowwise ? rowwise_scales_offset(rows, cols.extent()) : rows * width;
  if (!all_rows() || cols.dim != ShardDim::kCols || cols.end > cols_ ||
      column_shard_bytes(format_, rows, cols) != dst_bytes) {
    return make_error(ErrorCode::kInternal, "tensor '" + name + "': column shard slot size");
  }
  EPK_TRY(enqueue(work_dev, scratch_dev, stream));
  if (cudaError_t e = cudaMemcpy2DAsync(dst.as<void>(), width, (work_dev + cols.begin * elem).as<const void>(),
                                        cols_ * elem, width, rows, cudaMemcpyDeviceToDevice, stream);
      e != cudaSuccess) {
    return cuda_error(name, "column shard: cudaMemcpy2DAsync", e);
  }
  if (rowwise) {
    if (at > rows * width) {
      if (cudaError_t e = cudaMemsetAsync((dst + rows * width).as<void>(), 0, at - rows * width, stream);
          e != cudaSuccess) {
        return cuda_error(name, "column shard gap: cudaMemsetAsync", e);
      }
    }
    const DeviceAddress work_scales = work_dev + rowwise_scales_offset(rows, cols_);
    if (cudaError_t e = cudaMemcpyAsync((dst + at).as<void>(), work_scales.as<const void>(), rows * 4,
                                        cudaMemcpyDeviceToDevice, stream);
        e != cudaSuccess) {
      return cuda_error(name, "column shard scales: cudaMemcpyAsync", e);
    }
  }
  return {};
}

Status LatticeDevicePlan::check(const void* scratch_dev, cuda::Stream stream) const {
  cuda::DecodeStatus st;
  std::memcpy(&st, pinned_.get() + kStatusAt, sizeof(st));
  if (st.bad_tiles == 0) return {};
  Status named = cuda::read_status(plan_, scratch_dev, stream);
  return named ? make_error(ErrorCode::kCorruptTile, "tensor '" + plan_.job_name(0) +
                                                         "': a corrupt tile (device decode; its tile status was not "
                                                         "readable)")
               : named;
}

}  // namespace epk::serve
