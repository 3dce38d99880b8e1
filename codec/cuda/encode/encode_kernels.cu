// The device encoder's per-vector kernels and its reconstruction error (encode_kernels.h; the ordered per-row sums
// are encode_rows.cu's). Built with -fmad=false; every float operation that must match the CPU encoder is also an
// explicit _rn intrinsic.
#include <cuda_fp16.h>

#include <climits>

#include "codec/cuda/encode/encode_kernels.h"
#include "codec/cuda/encode/encode_load.cuh"
#include "codec/cuda/encode/encode_e8.cuh"

namespace epk::cuda::enc {

namespace {

constexpr int kBlock = 256;
constexpr int kMaxBlocks = 132 * 16;  // grid-stride: fewer blocks, fewer global atomics on the range slots
constexpr std::uint32_t kSharedBins = 12000;  // u32 bins in (under) the 48 KiB a block gets without opting in

template <Source S>
__global__ void quantize_kernel(const void* src, std::uint32_t cols, std::uint32_t vpr, const float* rms,
                                std::uint64_t n, float scale, std::uint8_t* coset, std::int32_t* fields, int* range,
                                unsigned long long* ones) {
  __shared__ int lo[kTables], hi[kTables];
  __shared__ unsigned long long block_ones;
  if (threadIdx.x < kTables) {
    lo[threadIdx.x] = INT_MAX;
    hi[threadIdx.x] = INT_MIN;
  }
  if (threadIdx.x == 0) block_ones = 0;
  __syncthreads();
  const unsigned lane = threadIdx.x & 31;
  // Every thread of a warp runs the same trip count, so the warp reductions below see all 32 lanes.
  const std::uint64_t stride = std::uint64_t(gridDim.x) * blockDim.x;
  const std::uint64_t first = std::uint64_t(blockIdx.x) * blockDim.x + threadIdx.x - lane;
  for (std::uint64_t w = first; w < n; w += stride) {
    const std::uint64_t i = w + lane;
    const bool active = i < n;
    std::int32_t f[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::uint8_t c = 0;
    if (active) {
      const std::uint64_t row = i / vpr;
      const std::uint32_t col0 = std::uint32_t(i % vpr) * 8;
      const float row_rms = rms[row];
      float y[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const std::uint32_t col = col0 + k;
        const float x = col < cols ? load_weight<S>(src, row * cols + col) : 0.0f;
        y[k] = __fdiv_rn(__fdiv_rn(x, row_rms), scale);
      }
      c = nearest_e8_fields(y, f);
      coset[i] = c;
      int4* out = reinterpret_cast<int4*>(fields + i * 8);
      out[0] = make_int4(f[0], f[1], f[2], f[3]);
      out[1] = make_int4(f[4], f[5], f[6], f[7]);
    }
    const unsigned full = 0xffffffffu;
    const unsigned ones_mask = __ballot_sync(full, active && c == 1);
    const unsigned zero_mask = __ballot_sync(full, active && c == 0);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int mn0 = __reduce_min_sync(full, active && c == 0 ? f[k] : INT_MAX);
      const int mx0 = __reduce_max_sync(full, active && c == 0 ? f[k] : INT_MIN);
      const int mn1 = __reduce_min_sync(full, active && c == 1 ? f[k] : INT_MAX);
      const int mx1 = __reduce_max_sync(full, active && c == 1 ? f[k] : INT_MIN);
      if (lane == 0) {
        if (zero_mask) {
          atomicMin(&lo[1 + 2 * k], mn0);
          atomicMax(&hi[1 + 2 * k], mx0);
        }
        if (ones_mask) {
          atomicMin(&lo[2 + 2 * k], mn1);
          atomicMax(&hi[2 + 2 * k], mx1);
        }
      }
    }
    if (lane == 0 && ones_mask) atomicAdd(&block_ones, (unsigned long long)__popc(ones_mask));
  }
  __syncthreads();
  if (threadIdx.x >= 1 && threadIdx.x < kTables && lo[threadIdx.x] <= hi[threadIdx.x]) {
    atomicMin(&range[2 * threadIdx.x], lo[threadIdx.x]);
    atomicMax(&range[2 * threadIdx.x + 1], hi[threadIdx.x]);
  }
  if (threadIdx.x == 0 && block_ones) atomicAdd(ones, block_ones);
}

// One block's share of the histogram: counts values of vectors blockIdx.x, + gridDim.x, ... into hist, through
// `local` (bins u32 entries of shared memory, zeroed here) when Shared.
template <bool Shared>
__device__ __forceinline__ void histogram_block(const std::uint8_t* coset, const std::int32_t* fields, std::uint64_t n,
                                                const int* s_lo, const int* s_base, std::uint32_t bins,
                                                std::uint32_t* local, unsigned long long* hist) {
  if constexpr (Shared) {
    for (std::uint32_t b = threadIdx.x; b < bins; b += blockDim.x) local[b] = 0;
  }
  __syncthreads();
  const std::uint64_t stride = std::uint64_t(gridDim.x) * blockDim.x;
  for (std::uint64_t i = std::uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int c = coset[i];
    const int4* p = reinterpret_cast<const int4*>(fields + i * 8);
    const int4 a = p[0], b = p[1];
    const int f[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int t = 1 + 2 * k + c;
      if (s_base[t] < 0) continue;
      const std::uint32_t bin = std::uint32_t(s_base[t] + (f[k] - s_lo[t]));
      if constexpr (Shared) {
        atomicAdd(&local[bin], 1u);
      } else {
        atomicAdd(&hist[bin], 1ull);
      }
    }
  }
  if constexpr (Shared) {
    __syncthreads();
    for (std::uint32_t b = threadIdx.x; b < bins; b += blockDim.x)
      if (local[b]) atomicAdd(&hist[b], (unsigned long long)local[b]);
  }
}

template <bool Shared>
__global__ void histogram_kernel(const std::uint8_t* coset, const std::int32_t* fields, std::uint64_t n,
                                 const int* lo, const int* base, std::uint32_t bins, unsigned long long* hist) {
  extern __shared__ std::uint32_t local[];
  __shared__ int s_lo[kTables], s_base[kTables];
  if (threadIdx.x < kTables) {
    s_lo[threadIdx.x] = lo[threadIdx.x];
    s_base[threadIdx.x] = base[threadIdx.x];
  }
  histogram_block<Shared>(coset, fields, n, s_lo, s_base, bins, local, hist);
}

// histogram_kernel with its layout read from the device (launch_histogram_layout's lo_base); launched with
// kSharedBins entries of shared memory, used when the bins fit (the same for every block).
__global__ void histogram_laid_out_kernel(const std::uint8_t* coset, const std::int32_t* fields, std::uint64_t n,
                                          const int* lo_base, unsigned long long* hist) {
  extern __shared__ std::uint32_t local[];
  __shared__ int s_lo[kTables], s_base[kTables];
  if (threadIdx.x < kTables) {
    s_lo[threadIdx.x] = lo_base[threadIdx.x];
    s_base[threadIdx.x] = lo_base[kTables + threadIdx.x];
  }
  const std::uint32_t bins = std::uint32_t(lo_base[2 * kTables]);
  if (bins == 0) return;
  if (bins <= kSharedBins) {
    histogram_block<true>(coset, fields, n, s_lo, s_base, bins, local, hist);
  } else {
    histogram_block<false>(coset, fields, n, s_lo, s_base, bins, local, hist);
  }
}

// The histogram's layout from the folded ranges, as encode_steps.cc's host layout computes it, then hist[0, bins)
// zeroed. One block.
__global__ void histogram_layout_kernel(const int* range, std::uint32_t alphabet_limit, int* lo_base,
                                        unsigned long long* hist) {
  __shared__ std::uint32_t s_bins;
  if (threadIdx.x == 0) {
    std::uint32_t bins = 0;
    lo_base[0] = 0;
    lo_base[kTables] = -1;
    for (int t = 1; t < kTables; ++t) {
      const int l = range[2 * t], h = range[2 * t + 1];
      lo_base[t] = l > h ? 0 : l;
      lo_base[kTables + t] = -1;
      if (l > h) continue;
      const std::uint64_t alphabet = std::uint64_t(std::int64_t(h) - l + 1);
      if (alphabet <= alphabet_limit) {
        lo_base[kTables + t] = int(bins);
        bins += std::uint32_t(alphabet);
      }
    }
    lo_base[2 * kTables] = int(bins);
    s_bins = bins;
  }
  __syncthreads();
  for (std::uint32_t b = threadIdx.x; b < s_bins; b += blockDim.x) hist[b] = 0;
}

// Row i of the gather: one block a row at a time, 16-bit words.
__global__ void gather_rows_kernel(const std::uint16_t* src, std::uint64_t row_words, const std::uint32_t* rows,
                                   std::uint32_t n, std::uint16_t* dst) {
  for (std::uint32_t i = blockIdx.x; i < n; i += gridDim.x) {
    const std::uint16_t* from = src + std::uint64_t(rows[i]) * row_words;
    std::uint16_t* to = dst + std::uint64_t(i) * row_words;
    for (std::uint64_t w = threadIdx.x; w < row_words; w += blockDim.x) to[w] = from[w];
  }
}

// One warp a row, lanes over its vectors, a shuffle reduction: the error needs no particular order (pack_tensor
// compares it with a ceiling; tests allow 1e-9 relative against the host decode's sum).
template <Source S>
__global__ void error_kernel(const void* src, std::uint32_t rows, std::uint32_t cols, std::uint32_t vpr,
                             const std::uint8_t* coset, const std::int32_t* fields, const float* scales, double* out,
                             std::uint8_t* nonzero) {
  const std::uint32_t r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const unsigned lane = threadIdx.x & 31;
  if (r >= rows) return;
  const float scale = scales[r];
  double sse = 0.0, energy = 0.0;
  bool rec_nz = false, src_nz = false;
  for (std::uint32_t v = lane; v < vpr; v += 32) {
    const std::uint64_t vi = std::uint64_t(r) * vpr + v;
    const float half = __fmul_rn(0.5f, float(coset[vi]));
    const int4* p = reinterpret_cast<const int4*>(fields + vi * 8);
    const int4 a = p[0], b = p[1];
    const std::int32_t par = (a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z) & 1;
    const std::int32_t z[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, 2 * b.w + par};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const std::uint32_t col = v * 8 + i;
      if (col >= cols) break;
      const float rec = __fmul_rn(__fadd_rn(float(z[i]), half), scale);
      const float x = load_weight<S>(src, std::uint64_t(r) * cols + col);
      const double d = __dsub_rn(double(rec), double(x));
      sse = __dadd_rn(sse, __dmul_rn(d, d));
      energy = __dadd_rn(energy, __dmul_rn(double(x), double(x)));
      rec_nz = rec_nz || rec != 0.0f;
      src_nz = src_nz || x != 0.0f;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    sse = __dadd_rn(sse, __shfl_down_sync(0xffffffffu, sse, o));
    energy = __dadd_rn(energy, __shfl_down_sync(0xffffffffu, energy, o));
  }
  rec_nz = __any_sync(0xffffffffu, rec_nz);
  src_nz = __any_sync(0xffffffffu, src_nz);
  if (lane != 0) return;
  out[2 * std::uint64_t(r)] = sse;
  out[2 * std::uint64_t(r) + 1] = energy;
  nonzero[2 * std::uint64_t(r)] = rec_nz;
  nonzero[2 * std::uint64_t(r) + 1] = src_nz;
}

unsigned grid_for(std::uint64_t n) {
  const std::uint64_t blocks = (n + kBlock - 1) / kBlock;
  return unsigned(blocks < kMaxBlocks ? (blocks ? blocks : 1) : kMaxBlocks);
}

unsigned row_grid(std::uint32_t rows, int block) { return unsigned((rows + block - 1) / block); }


}  // namespace

void launch_quantize(const void* src, Source dtype, std::uint32_t cols, std::uint32_t vpr, const float* rms,
                     std::uint64_t n, float scale, std::uint8_t* coset, std::int32_t* fields, int* range,
                     unsigned long long* ones, cudaStream_t stream) {
  EPK_ENC_DISPATCH(dtype, quantize_kernel, grid_for(n), kBlock, 0, stream, src, cols, vpr, rms, n, scale, coset,
                   fields, range, ones);
}

void launch_gather_rows(const void* src, std::size_t row_bytes, const std::uint32_t* rows, std::uint32_t n,
                        void* dst, cudaStream_t stream) {
  if (n == 0) return;
  gather_rows_kernel<<<n < 65535u ? n : 65535u, 256, 0, stream>>>(static_cast<const std::uint16_t*>(src),
                                                                   row_bytes / 2, rows, n,
                                                                   static_cast<std::uint16_t*>(dst));
}

void launch_histogram(const std::uint8_t* coset, const std::int32_t* fields, std::uint64_t n, const int* lo,
                      const int* base, std::uint32_t bins, unsigned long long* hist, cudaStream_t stream) {
  if (bins <= kSharedBins) {
    histogram_kernel<true><<<grid_for(n), kBlock, bins * sizeof(std::uint32_t), stream>>>(coset, fields, n, lo, base,
                                                                                          bins, hist);
  } else {
    histogram_kernel<false><<<grid_for(n), kBlock, 0, stream>>>(coset, fields, n, lo, base, bins, hist);
  }
}

void launch_histogram_layout(const int* range, std::uint32_t alphabet_limit, int* lo_base, unsigned long long* hist,
                             cudaStream_t stream) {
  histogram_layout_kernel<<<1, 1024, 0, stream>>>(range, alphabet_limit, lo_base, hist);
}

void launch_histogram_laid_out(const std::uint8_t* coset, const std::int32_t* fields, std::uint64_t n,
                               const int* lo_base, unsigned long long* hist, cudaStream_t stream) {
  histogram_laid_out_kernel<<<grid_for(n), kBlock, kSharedBins * sizeof(std::uint32_t), stream>>>(coset, fields, n,
                                                                                                lo_base, hist);
}

void launch_error_sums(const void* src, Source dtype, std::uint32_t rows, std::uint32_t cols, std::uint32_t vpr,
                       const std::uint8_t* coset, const std::int32_t* fields, const float* scales, double* out,
                       std::uint8_t* nonzero, cudaStream_t stream) {
  EPK_ENC_DISPATCH(dtype, error_kernel, row_grid(rows, 8), 256, 0, stream, src, rows, cols, vpr, coset,
                   fields, scales, out, nonzero);
}

}  // namespace epk::cuda::enc
