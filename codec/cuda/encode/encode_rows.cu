// The device encoder's ordered per-row sums (encode_kernels.h: launch_row_stats, launch_refit_sums): float64 sums
// that must be formed in the CPU's column order, so one lane owns a row and walks it, 32 rows a block. Built with
// -fmad=false; every float operation that must match the CPU encoder is an explicit _rn intrinsic.
// Two forms of each pass, the same arithmetic in the same order:
// - streamed, for rows whose bytes start 16-byte aligned and tile into 64-column slices (cols a multiple of 128,
//   which every large layer is): the block's four warps copy slices kStages - 1 ahead into shared memory with
//   asynchronous 16-byte copies while warp 0 sums the current one, so the sums never wait on a load;
// - plain, for any shape: warp 0 alone stages 32-column slices with ordinary loads, then sums them.
// The plain form is bound by each warp waiting on its own loads (a 10240x3840 layer gives 320 warps for the H200's
// 132 SMs): several times the streamed form's kernel time (docs/measurements/gpu-encoder.md).
#include <cuda_pipeline.h>

#include <type_traits>

#include "codec/cuda/encode/encode_kernels.h"
#include "codec/cuda/encode/encode_load.cuh"
#include "codec/cuda/encode/encode_e8.cuh"

namespace epk::cuda::enc {

namespace {

constexpr int kRows = 32;  // rows a block: warp 0's lanes

// One row's running sums: row statistics (encode.cc's first pass) ...
struct RowStats {
  double sum2 = 0.0;
  float max_abs = 0.0f;
  long long bad = -1;  // the first non-finite column
  __device__ __forceinline__ void add(float v, std::uint32_t col) {
    if (!isfinite(v)) {
      if (bad < 0) bad = col;
      return;
    }
    const double d = double(v);
    sum2 = __dadd_rn(sum2, __dmul_rn(d, d));
    max_abs = fmaxf(max_abs, fabsf(v));
  }
  __device__ __forceinline__ void store(std::uint32_t r, std::uint32_t padded, float* rms, float* row_max,
                                        long long* bad_col) const {
    row_max[r] = max_abs;
    bad_col[r] = bad;
    rms[r] = fmaxf(__double2float_rn(__dsqrt_rn(__ddiv_rn(sum2, double(padded)))), 1e-12f);
  }
};

// ... and refit_rows': <x, p>, <p, p>, <x, x> over the padded row.
struct RefitSums {
  double num = 0.0, den = 0.0, energy = 0.0;
  // One vector: its 8 weights and its fields and coset (lattice::fields_to_point, then coordinate).
  __device__ __forceinline__ void add(const float x[8], const std::int32_t f[8], std::uint8_t c) {
    const std::int32_t parity = (f[0] ^ f[1] ^ f[2] ^ f[3] ^ f[4] ^ f[5] ^ f[6]) & 1;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const std::int32_t z = i < 7 ? f[i] : 2 * f[7] + parity;
      const double level = double(coordinate(z, c));
      const double xv = double(x[i]);
      num = __dadd_rn(num, __dmul_rn(xv, level));
      den = __dadd_rn(den, __dmul_rn(level, level));
      energy = __dadd_rn(energy, __dmul_rn(xv, xv));
    }
  }
  __device__ __forceinline__ void store(std::uint32_t r, double* sums) const {
    sums[3 * std::uint64_t(r)] = num;
    sums[3 * std::uint64_t(r) + 1] = den;
    sums[3 * std::uint64_t(r) + 2] = energy;
  }
};

// ---- Streamed form -------------------------------------------------------------------------------------------

constexpr int kStages = 4;
constexpr int kStreamThreads = 128;
constexpr std::uint32_t kSliceCols = 64;  // 8 vectors
constexpr std::uint32_t kSliceVectors = kSliceCols / 8;

// A stage's rows are an odd number of 16-byte units apart (the slice's bytes plus one unit), so that warp 0's 16-byte
// reads of one chunk from 8 consecutive rows (a quarter-warp's) fall in 8 different units of the 128-byte bank row.
template <Source S>
inline constexpr std::uint32_t kXStride = kSliceCols * kWeightBytes<S> + 16;
inline constexpr std::uint32_t kFieldStride = kSliceVectors * 32 + 16;
inline constexpr std::uint32_t kCosetStride = kSliceVectors;  // 8-byte reads, rows 8 bytes apart

template <Source S>
inline constexpr std::uint32_t kStatsStage = kRows * kXStride<S>;
template <Source S>
inline constexpr std::uint32_t kRefitStage = kRows * (kXStride<S> + kFieldStride + kCosetStride);

// Issues this thread's share of the asynchronous copies of `rows_in_slice` rows of `bytes` each (a multiple of
// `chunk`, 8 or 16) from src (row r at src + r * pitch) to dst (row r at dst + r * stride); rows at or past `live`
// are zero-filled.
__device__ __forceinline__ void copy_rows(unsigned char* dst, std::uint32_t stride, const unsigned char* src,
                                          std::uint64_t pitch, std::uint32_t bytes, std::uint32_t chunk,
                                          std::uint32_t live) {
  const std::uint32_t per_row = bytes / chunk;
  for (std::uint32_t i = threadIdx.x; i < kRows * per_row; i += kStreamThreads) {
    const std::uint32_t r = i / per_row, k = i % per_row;
    const bool in = r < live;
    // A zero-filled copy reads nothing; its source address is still one that exists.
    const unsigned char* from = in ? src + r * pitch + k * chunk : src;
    __pipeline_memcpy_async(dst + r * stride + k * chunk, from, chunk, in ? 0 : chunk);
  }
}

// The pipeline: slices kStages - 1 ahead are in flight (one commit group each), warp 0 sums slice t from stage
// t % kStages, and the block's barriers hand each stage back before it is refilled.
template <class Pass>
__device__ __forceinline__ void stream_slices(Pass& pass, std::uint32_t slices) {
  for (std::uint32_t t = 0; t + 1 < kStages; ++t) {
    if (t < slices) pass.issue(t % kStages, t);
    __pipeline_commit();
  }
  for (std::uint32_t t = 0; t < slices; ++t) {
    const std::uint32_t ahead = t + kStages - 1;
    if (ahead < slices) pass.issue(ahead % kStages, ahead);
    __pipeline_commit();
    __pipeline_wait_prior(kStages - 1);  // this thread's copies of slice t have landed ...
    __syncthreads();                     // ... and every thread's
    if (threadIdx.x < 32) pass.sum(t % kStages, t);
    __syncthreads();  // stage t % kStages is refilled by the next step
  }
}

template <Source S>
struct StreamedStats {
  const unsigned char* src;
  std::uint32_t cols, live;  // live: rows of the block in the tensor
  unsigned char* smem;
  RowStats acc;

  __device__ __forceinline__ void issue(std::uint32_t stage, std::uint32_t t) {
    constexpr std::uint32_t kBytes = kSliceCols * kWeightBytes<S>;
    copy_rows(smem + stage * kStatsStage<S>, kXStride<S>, src + std::uint64_t(t) * kBytes,
              std::uint64_t(cols) * kWeightBytes<S>, kBytes, 16, live);
  }
  __device__ __forceinline__ void sum(std::uint32_t stage, std::uint32_t t) {
    const unsigned char* row = smem + stage * kStatsStage<S> + threadIdx.x * kXStride<S>;
    constexpr int kPerChunk = 16 / kWeightBytes<S>;
#pragma unroll
    for (std::uint32_t k = 0; k < kSliceCols / kPerChunk; ++k) {
      const uint4 v = *reinterpret_cast<const uint4*>(row + 16 * k);
      const std::uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int e = 0; e < kPerChunk; ++e) {
        const std::uint32_t bits = kWeightBytes<S> == 4 ? w[e] : w[e / 2] >> (16 * (e & 1));
        acc.add(weight_of<S>(bits), t * kSliceCols + k * kPerChunk + e);
      }
    }
  }
};

template <Source S>
__global__ void __launch_bounds__(kStreamThreads)
    row_stats_streamed(const void* src, std::uint32_t rows, std::uint32_t cols, float* rms, float* row_max,
                       long long* bad_col) {
  extern __shared__ __align__(16) unsigned char smem[];
  const std::uint32_t r0 = blockIdx.x * kRows;
  StreamedStats<S> pass{static_cast<const unsigned char*>(src) + std::uint64_t(r0) * cols * kWeightBytes<S>, cols,
                        rows - r0 < kRows ? rows - r0 : kRows, smem};
  stream_slices(pass, cols / kSliceCols);
  if (threadIdx.x < pass.live) pass.acc.store(r0 + threadIdx.x, cols, rms, row_max, bad_col);
}

template <Source S>
struct StreamedRefit {
  const unsigned char* src;
  const unsigned char* fields;
  const unsigned char* coset;
  std::uint32_t cols, live;
  unsigned char* smem;
  RefitSums acc;

  __device__ __forceinline__ unsigned char* x_of(std::uint32_t stage) const { return smem + stage * kRefitStage<S>; }
  __device__ __forceinline__ unsigned char* f_of(std::uint32_t stage) const {
    return x_of(stage) + kRows * kXStride<S>;
  }
  __device__ __forceinline__ unsigned char* c_of(std::uint32_t stage) const {
    return f_of(stage) + kRows * kFieldStride;
  }
  __device__ __forceinline__ void issue(std::uint32_t stage, std::uint32_t t) {
    constexpr std::uint32_t kXBytes = kSliceCols * kWeightBytes<S>;
    const std::uint64_t vpr = cols / 8;
    copy_rows(x_of(stage), kXStride<S>, src + std::uint64_t(t) * kXBytes, std::uint64_t(cols) * kWeightBytes<S>,
              kXBytes, 16, live);
    copy_rows(f_of(stage), kFieldStride, fields + std::uint64_t(t) * kSliceVectors * 32, vpr * 32,
              kSliceVectors * 32, 16, live);
    copy_rows(c_of(stage), kCosetStride, coset + std::uint64_t(t) * kSliceVectors, vpr, kSliceVectors, 8, live);
  }
  __device__ __forceinline__ void sum(std::uint32_t stage, std::uint32_t) {
    const unsigned char* xr = x_of(stage) + threadIdx.x * kXStride<S>;
    const unsigned char* fr = f_of(stage) + threadIdx.x * kFieldStride;
    const uint2 cw = *reinterpret_cast<const uint2*>(c_of(stage) + threadIdx.x * kCosetStride);
    const std::uint32_t cosets[2] = {cw.x, cw.y};
#pragma unroll
    for (std::uint32_t v = 0; v < kSliceVectors; ++v) {
      const int4 a = *reinterpret_cast<const int4*>(fr + 32 * v);
      const int4 b = *reinterpret_cast<const int4*>(fr + 32 * v + 16);
      const std::int32_t f[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
      float x[8];
      if constexpr (kWeightBytes<S> == 4) {
        const float4 p = *reinterpret_cast<const float4*>(xr + 32 * v);
        const float4 q = *reinterpret_cast<const float4*>(xr + 32 * v + 16);
        x[0] = p.x, x[1] = p.y, x[2] = p.z, x[3] = p.w, x[4] = q.x, x[5] = q.y, x[6] = q.z, x[7] = q.w;
      } else {
        const uint4 p = *reinterpret_cast<const uint4*>(xr + 16 * v);
        const std::uint32_t w[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
        for (int e = 0; e < 8; ++e) x[e] = weight_of<S>(w[e / 2] >> (16 * (e & 1)));
      }
      acc.add(x, f, std::uint8_t(cosets[v / 4] >> (8 * (v % 4))));
    }
  }
};

template <Source S>
__global__ void __launch_bounds__(kStreamThreads)
    refit_streamed(const void* src, std::uint32_t rows, std::uint32_t cols, const std::uint8_t* coset,
                   const std::int32_t* fields, double* sums) {
  extern __shared__ __align__(16) unsigned char smem[];
  const std::uint32_t r0 = blockIdx.x * kRows;
  const std::uint64_t vpr = cols / 8;
  StreamedRefit<S> pass{static_cast<const unsigned char*>(src) + std::uint64_t(r0) * cols * kWeightBytes<S>,
                        reinterpret_cast<const unsigned char*>(fields + std::uint64_t(r0) * vpr * 8),
                        coset + std::uint64_t(r0) * vpr,
                        cols,
                        rows - r0 < kRows ? rows - r0 : kRows,
                        smem};
  stream_slices(pass, cols / kSliceCols);
  if (threadIdx.x < pass.live) pass.acc.store(r0 + threadIdx.x, sums);
}

// ---- Plain form ----------------------------------------------------------------------------------------------

constexpr std::uint32_t kPlainSlice = 32;

template <Source S>
__global__ void row_stats_plain(const void* src, std::uint32_t rows, std::uint32_t cols, std::uint32_t padded,
                                float* rms, float* row_max, long long* bad_col) {
  __shared__ float tile[kRows][kPlainSlice + 1];
  const unsigned lane = threadIdx.x;
  const std::uint32_t r0 = blockIdx.x * kRows;
  RowStats acc;
  for (std::uint32_t c0 = 0; c0 < cols; c0 += kPlainSlice) {
    // All 32 loads issued before the first store, so they are in flight together (one row per load, the lanes on
    // consecutive columns).
    float held[kRows];
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
      const std::uint32_t row = r0 + j, col = c0 + lane;
      held[j] = row < rows && col < cols ? load_weight<S>(src, std::uint64_t(row) * cols + col) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kRows; ++j) tile[j][lane] = held[j];
    __syncwarp();
    const std::uint32_t n = cols - c0 < kPlainSlice ? cols - c0 : kPlainSlice;
    for (std::uint32_t k = 0; k < n; ++k) acc.add(tile[lane][k], c0 + k);
    __syncwarp();
  }
  if (r0 + lane < rows) acc.store(r0 + lane, padded, rms, row_max, bad_col);
}

template <Source S>
__global__ void refit_plain(const void* src, std::uint32_t rows, std::uint32_t cols, std::uint32_t vpr,
                            const std::uint8_t* coset, const std::int32_t* fields, double* sums) {
  __shared__ float x[kRows][kPlainSlice + 1];
  __shared__ std::int32_t f[kRows][kPlainSlice + 1];
  __shared__ std::uint8_t c[kRows][kPlainSlice / 8];
  const unsigned lane = threadIdx.x;
  const std::uint32_t r0 = blockIdx.x * kRows;
  RefitSums acc;
  const std::uint32_t padded = vpr * 8;
  for (std::uint32_t c0 = 0; c0 < padded; c0 += kPlainSlice) {
    // The 32 rows' slice [c0, c0 + 32) of x (0 past cols), of the fields (4 vectors a row) and of the cosets: every
    // load issued before the first store, two halves of 16 rows bounding the registers held.
    const std::uint32_t v0 = c0 / 8, col = c0 + lane;
    const bool in = v0 + lane / 8 < vpr;
    const bool coset_lane = lane < kPlainSlice / 8 && v0 + lane < vpr;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float xh[16];
      std::int32_t fh[16];
      std::uint8_t ch[16];
#pragma unroll
      for (int jj = 0; jj < 16; ++jj) {
        const std::uint32_t row = r0 + 16 * half + jj;
        const bool live = row < rows;
        xh[jj] = live && col < cols ? load_weight<S>(src, std::uint64_t(row) * cols + col) : 0.0f;
        fh[jj] = live && in ? fields[(std::uint64_t(row) * vpr + v0) * 8 + lane] : 0;
        ch[jj] = live && coset_lane ? coset[std::uint64_t(row) * vpr + v0 + lane] : 0;
      }
#pragma unroll
      for (int jj = 0; jj < 16; ++jj) {
        x[16 * half + jj][lane] = xh[jj];
        f[16 * half + jj][lane] = fh[jj];
        if (lane < kPlainSlice / 8) c[16 * half + jj][lane] = ch[jj];
      }
    }
    __syncwarp();
    const std::uint32_t nv = (padded - c0) / 8 < kPlainSlice / 8 ? (padded - c0) / 8 : kPlainSlice / 8;
    for (std::uint32_t v = 0; v < nv; ++v) acc.add(&x[lane][8 * v], &f[lane][8 * v], c[lane][v]);
    __syncwarp();
  }
  if (r0 + lane < rows) acc.store(r0 + lane, sums);
}

// The streamed form's condition: every row of the source, the fields and the cosets starts 16-byte aligned and the
// 64-column slices tile the row.
bool streamable(std::uint32_t cols) { return cols % 128 == 0; }

unsigned row_blocks(std::uint32_t rows) { return (rows + kRows - 1) / kRows; }

// The streamed kernels' shared memory is above the 48 KiB a block gets without opting in (refit: 69 KiB for F32);
// the opt-in is the device's, so it is asked for at each launch (a driver call of about a microsecond).
template <class Kernel>
bool allow_shared(Kernel kernel, std::uint32_t bytes) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)) == cudaSuccess;
}

// False (nothing launched) where the device refuses the shared memory: the caller takes the plain form.
template <Source S>
bool row_stats_streamed_launch(const void* src, std::uint32_t rows, std::uint32_t cols, float* rms, float* row_max,
                               long long* bad_col, cudaStream_t stream) {
  constexpr std::uint32_t kBytes = kStages * kStatsStage<S>;
  if (!allow_shared(row_stats_streamed<S>, kBytes)) return false;
  row_stats_streamed<S><<<row_blocks(rows), kStreamThreads, kBytes, stream>>>(src, rows, cols, rms, row_max,
                                                                              bad_col);
  return true;
}

template <Source S>
bool refit_streamed_launch(const void* src, std::uint32_t rows, std::uint32_t cols, const std::uint8_t* coset,
                           const std::int32_t* fields, double* sums, cudaStream_t stream) {
  constexpr std::uint32_t kBytes = kStages * kRefitStage<S>;
  if (!allow_shared(refit_streamed<S>, kBytes)) return false;
  refit_streamed<S><<<row_blocks(rows), kStreamThreads, kBytes, stream>>>(src, rows, cols, coset, fields, sums);
  return true;
}

// fn(std::integral_constant<Source, S>) for the runtime dtype S.
template <class Fn>
bool with_source(Source dtype, Fn&& fn) {
  switch (dtype) {
    case Source::kF32: return fn(std::integral_constant<Source, Source::kF32>{});
    case Source::kBF16: return fn(std::integral_constant<Source, Source::kBF16>{});
    case Source::kF16: return fn(std::integral_constant<Source, Source::kF16>{});
  }
  return false;
}

}  // namespace

void launch_row_stats(const void* src, Source dtype, std::uint32_t rows, std::uint32_t cols, std::uint32_t padded,
                      float* rms, float* row_max, long long* bad_col, cudaStream_t stream) {
  if (rows == 0) return;
  const bool streamed = streamable(cols) && with_source(dtype, [&](auto s) {
                          return row_stats_streamed_launch<decltype(s)::value>(src, rows, cols, rms, row_max, bad_col,
                                                                               stream);
                        });
  if (streamed) return;
  EPK_ENC_DISPATCH(dtype, row_stats_plain, row_blocks(rows), 32, 0, stream, src, rows, cols, padded, rms, row_max,
                   bad_col);
}

void launch_refit_sums(const void* src, Source dtype, std::uint32_t rows, std::uint32_t cols, std::uint32_t vpr,
                       const std::uint8_t* coset, const std::int32_t* fields, double* sums, cudaStream_t stream) {
  if (rows == 0) return;
  const bool streamed = streamable(cols) && with_source(dtype, [&](auto s) {
                          return refit_streamed_launch<decltype(s)::value>(src, rows, cols, coset, fields, sums,
                                                                           stream);
                        });
  if (streamed) return;
  EPK_ENC_DISPATCH(dtype, refit_plain, row_blocks(rows), 32, 0, stream, src, rows, cols, vpr, coset, fields, sums);
}

}  // namespace epk::cuda::enc
