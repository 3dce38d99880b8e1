// The device encoder's per-row and per-vector kernels (encode_kernels.h). Built with -fmad=false; every float
// operation that must match the CPU encoder is also an explicit _rn intrinsic.
#include <cuda_fp16.h>

#include <climits>

#include "codec/cuda/encode_e8.cuh"
#include "codec/cuda/encode_kernels.h"

namespace epk::cuda::enc {

namespace {

constexpr int kBlock = 256;
constexpr int kMaxBlocks = 132 * 16;  // grid-stride: fewer blocks, fewer global atomics on the range slots
constexpr std::uint32_t kSharedBins = 12000;  // u32 bins in (under) the 48 KiB a block gets without opting in

template <Source S>
__device__ __forceinline__ float load(const void* src, std::uint64_t i) {
  if constexpr (S == Source::kF32) {
    return static_cast<const float*>(src)[i];
  } else if constexpr (S == Source::kBF16) {
    return __uint_as_float(std::uint32_t(static_cast<const std::uint16_t*>(src)[i]) << 16);
  } else {
    return __half2float(__ushort_as_half(static_cast<const std::uint16_t*>(src)[i]));
  }
}

// The per-row kernels: one warp takes 32 rows, lane k row k; each pass stages a 32-column slice of the 32 rows in
// shared memory with coalesced loads (a row's 32 columns per load), then each lane walks its row's slice in column
// order, so every row's float64 sums are formed in exactly the CPU's order.
constexpr int kSlice = 32;

template <Source S>
__global__ void row_stats_kernel(const void* src, std::uint32_t rows, std::uint32_t cols, std::uint32_t padded,
                                 float* rms, float* row_max, long long* bad_col) {
  __shared__ float tile[32][kSlice + 1];
  const unsigned lane = threadIdx.x;
  const std::uint32_t r0 = blockIdx.x * 32;
  const std::uint32_t r = r0 + lane;
  double sum2 = 0.0;
  float m = 0.0f;
  long long bad = -1;
  for (std::uint32_t c0 = 0; c0 < cols; c0 += kSlice) {
    // All 32 loads issued before the first store, so they are in flight together (one row per load, the lanes on
    // consecutive columns).
    float held[32];
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const std::uint32_t row = r0 + j, col = c0 + lane;
      held[j] = row < rows && col < cols ? load<S>(src, std::uint64_t(row) * cols + col) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < 32; ++j) tile[j][lane] = held[j];
    __syncwarp();
    const std::uint32_t n = cols - c0 < kSlice ? cols - c0 : kSlice;
    for (std::uint32_t k = 0; k < n; ++k) {
      const float v = tile[lane][k];
      if (!isfinite(v)) {
        if (bad < 0) bad = c0 + k;
        continue;
      }
      const double d = double(v);
      sum2 = __dadd_rn(sum2, __dmul_rn(d, d));
      m = fmaxf(m, fabsf(v));
    }
    __syncwarp();
  }
  if (r >= rows) return;
  row_max[r] = m;
  bad_col[r] = bad;
  rms[r] = fmaxf(__double2float_rn(__dsqrt_rn(__ddiv_rn(sum2, double(padded)))), 1e-12f);
}

// Stages the 32 rows' slice [c0, c0 + 32) of x (0 past cols), of the fields (4 vectors a row: fields[row][8v + k])
// and of the cosets.
template <Source S>
__device__ __forceinline__ void stage_slice(const void* src, std::uint32_t rows, std::uint32_t cols,
                                            std::uint32_t vpr, const std::uint8_t* coset,
                                            const std::int32_t* fields, std::uint32_t r0, std::uint32_t c0,
                                            float (&x)[32][kSlice + 1], std::int32_t (&f)[32][kSlice + 1],
                                            std::uint8_t (&c)[32][kSlice / 8]) {
  const unsigned lane = threadIdx.x;
  const std::uint32_t v0 = c0 / 8;
  const std::uint32_t col = c0 + lane;
  const bool in = v0 + lane / 8 < vpr;
  const bool coset_lane = lane < kSlice / 8 && v0 + lane < vpr;
  // Every load predicated (no early exit) and issued before the first store, so the slice's loads are in flight
  // together; two halves of 16 rows bound the registers held.
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float xh[16];
    std::int32_t fh[16];
    std::uint8_t ch[16];
#pragma unroll
    for (int jj = 0; jj < 16; ++jj) {
      const std::uint32_t row = r0 + 16 * half + jj;
      const bool live = row < rows;
      xh[jj] = live && col < cols ? load<S>(src, std::uint64_t(row) * cols + col) : 0.0f;
      fh[jj] = live && in ? fields[(std::uint64_t(row) * vpr + v0) * 8 + lane] : 0;
      ch[jj] = live && coset_lane ? coset[std::uint64_t(row) * vpr + v0 + lane] : 0;
    }
#pragma unroll
    for (int jj = 0; jj < 16; ++jj) {
      x[16 * half + jj][lane] = xh[jj];
      f[16 * half + jj][lane] = fh[jj];
      if (lane < kSlice / 8) c[16 * half + jj][lane] = ch[jj];
    }
  }
}

template <Source S>
__global__ void quantize_kernel(const void* src, std::uint32_t cols, std::uint32_t vpr, const float* rms,
                                const std::uint32_t* row_map, std::uint64_t n, float scale, std::uint8_t* coset,
                                std::int32_t* fields, int* range, unsigned long long* ones) {
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
      const std::uint64_t row = row_map ? row_map[i / vpr] : i / vpr;
      const std::uint32_t col0 = std::uint32_t(i % vpr) * 8;
      const float row_rms = rms[row];
      float y[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const std::uint32_t col = col0 + k;
        const float x = col < cols ? load<S>(src, row * cols + col) : 0.0f;
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

template <Source S>
__global__ void refit_kernel(const void* src, std::uint32_t rows, std::uint32_t cols, std::uint32_t vpr,
                             const std::uint8_t* coset, const std::int32_t* fields, double* sums) {
  __shared__ float x[32][kSlice + 1];
  __shared__ std::int32_t f[32][kSlice + 1];
  __shared__ std::uint8_t c[32][kSlice / 8];
  const unsigned lane = threadIdx.x;
  const std::uint32_t r0 = blockIdx.x * 32;
  const std::uint32_t r = r0 + lane;
  double num = 0.0, den = 0.0, energy = 0.0;
  const std::uint32_t padded = vpr * 8;
  for (std::uint32_t c0 = 0; c0 < padded; c0 += kSlice) {
    stage_slice<S>(src, rows, cols, vpr, coset, fields, r0, c0, x, f, c);
    __syncwarp();
    if (r < rows) {
      const std::uint32_t nv = (padded - c0) / 8 < kSlice / 8 ? (padded - c0) / 8 : kSlice / 8;
      for (std::uint32_t v = 0; v < nv; ++v) {
        const std::int32_t* fv = &f[lane][8 * v];
        const std::int32_t par = (fv[0] ^ fv[1] ^ fv[2] ^ fv[3] ^ fv[4] ^ fv[5] ^ fv[6]) & 1;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const std::int32_t z = i < 7 ? fv[i] : 2 * fv[7] + par;
          const double level = double(coordinate(z, c[lane][v]));
          const double xv = double(x[lane][8 * v + i]);
          num = __dadd_rn(num, __dmul_rn(xv, level));
          den = __dadd_rn(den, __dmul_rn(level, level));
          energy = __dadd_rn(energy, __dmul_rn(xv, xv));
        }
      }
    }
    __syncwarp();
  }
  if (r >= rows) return;
  sums[3 * std::uint64_t(r)] = num;
  sums[3 * std::uint64_t(r) + 1] = den;
  sums[3 * std::uint64_t(r) + 2] = energy;
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
      const float x = load<S>(src, std::uint64_t(r) * cols + col);
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

constexpr int kRowBlock = 32;  // one warp (32 rows) a block: the rows spread over as many SMs as they can

}  // namespace

#define EPK_ENC_DISPATCH(dtype, KERNEL, GRID, BLOCK, SMEM, STREAM, ...)                         \
  switch (dtype) {                                                                             \
    case Source::kF32: KERNEL<Source::kF32><<<GRID, BLOCK, SMEM, STREAM>>>(__VA_ARGS__); break;   \
    case Source::kBF16: KERNEL<Source::kBF16><<<GRID, BLOCK, SMEM, STREAM>>>(__VA_ARGS__); break; \
    case Source::kF16: KERNEL<Source::kF16><<<GRID, BLOCK, SMEM, STREAM>>>(__VA_ARGS__); break;   \
  }

void launch_row_stats(const void* src, Source dtype, std::uint32_t rows, std::uint32_t cols, std::uint32_t padded,
                      float* rms, float* row_max, long long* bad_col, cudaStream_t stream) {
  EPK_ENC_DISPATCH(dtype, row_stats_kernel, row_grid(rows, kRowBlock), kRowBlock, 0, stream, src, rows, cols, padded,
                   rms, row_max, bad_col);
}

void launch_quantize(const void* src, Source dtype, std::uint32_t cols, std::uint32_t vpr, const float* rms,
                     const std::uint32_t* row_map, std::uint64_t n, float scale, std::uint8_t* coset,
                     std::int32_t* fields, int* range, unsigned long long* ones, cudaStream_t stream) {
  EPK_ENC_DISPATCH(dtype, quantize_kernel, grid_for(n), kBlock, 0, stream, src, cols, vpr, rms, row_map, n, scale,
                   coset, fields, range, ones);
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

void launch_refit_sums(const void* src, Source dtype, std::uint32_t rows, std::uint32_t cols, std::uint32_t vpr,
                       const std::uint8_t* coset, const std::int32_t* fields, double* sums, cudaStream_t stream) {
  EPK_ENC_DISPATCH(dtype, refit_kernel, row_grid(rows, kRowBlock), kRowBlock, 0, stream, src, rows, cols, vpr, coset,
                   fields, sums);
}

void launch_error_sums(const void* src, Source dtype, std::uint32_t rows, std::uint32_t cols, std::uint32_t vpr,
                       const std::uint8_t* coset, const std::int32_t* fields, const float* scales, double* out,
                       std::uint8_t* nonzero, cudaStream_t stream) {
  EPK_ENC_DISPATCH(dtype, error_kernel, row_grid(rows, 8), 256, 0, stream, src, rows, cols, vpr, coset,
                   fields, scales, out, nonzero);
}

}  // namespace epk::cuda::enc
