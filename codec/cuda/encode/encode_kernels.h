// Launchers of the device encoder's kernels (encode_kernels.cu, encode_rans.cu), host-only. Each kernel computes
// what one CPU function computes, with the same arithmetic (encode_e8.cuh says how); the caller (encode_steps.cc)
// owns the buffers and the stream. Source dtypes on the device: F32, BF16, F16 (kSource* below).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace epk::cuda::enc {

enum class Source : int { kF32 = 0, kBF16 = 1, kF16 = 2 };

inline constexpr int kTables = 17;

// Per row (encode.cc's first pass): rms[r], the row's largest |x| and its first non-finite column (-1: none).
void launch_row_stats(const void* src, Source dtype, std::uint32_t rows, std::uint32_t cols, std::uint32_t padded,
                      float* rms, float* row_max, long long* bad_col, cudaStream_t stream);

// Quantises n vectors (quantize_vectors of x / rms / scale): vector i is vector (i % vpr) of row i / vpr. Writes
// coset[n], fields[8n] and folds each table's range into range[2 * t] (min) and range[2 * t + 1] (max) and the
// coset-1 count into *ones (the caller resets them).
void launch_quantize(const void* src, Source dtype, std::uint32_t cols, std::uint32_t vpr, const float* rms,
                     std::uint64_t n, float scale, std::uint8_t* coset, std::int32_t* fields, int* range,
                     unsigned long long* ones, cudaStream_t stream);

// Rows rows[i] (row_bytes each, an even number) of src, one after another at dst: row i at dst + i * row_bytes.
void launch_gather_rows(const void* src, std::size_t row_bytes, const std::uint32_t* rows, std::uint32_t n,
                        void* dst, cudaStream_t stream);

// Histograms of the tables: for each table t with base[t] >= 0, hist[base[t] + value - lo[t]] counts its values
// (lo and base: kTables entries each, on the device). bins is the total; the caller zeroes hist.
void launch_histogram(const std::uint8_t* coset, const std::int32_t* fields, std::uint64_t n, const int* lo,
                      const int* base, std::uint32_t bins, unsigned long long* hist, cudaStream_t stream);

// The histogram's layout on the device, from the ranges launch_quantize folded: lo_base[t] the table's smallest
// value (0 for an empty table), lo_base[kTables + t] its first bin (-1: empty, or wider than alphabet_limit),
// lo_base[2 * kTables] the bins in all (lo_base: 2 kTables + 1 ints); and hist[0, bins) zeroed (hist: room for
// (kTables - 1) * alphabet_limit entries). Table 0 (the coset) has no bins.
void launch_histogram_layout(const int* range, std::uint32_t alphabet_limit, int* lo_base, unsigned long long* hist,
                             cudaStream_t stream);
// launch_histogram with that layout, read on the device.
void launch_histogram_laid_out(const std::uint8_t* coset, const std::int32_t* fields, std::uint64_t n,
                               const int* lo_base, unsigned long long* hist, cudaStream_t stream);

// refit_rows' sums per row: sums[3r] = <x, p>, sums[3r+1] = <p, p>, sums[3r+2] = <x, x>, in float64 in the CPU order.
void launch_refit_sums(const void* src, Source dtype, std::uint32_t rows, std::uint32_t cols, std::uint32_t vpr,
                       const std::uint8_t* coset, const std::int32_t* fields, double* sums, cudaStream_t stream);

// The decoder's reconstruction ((float(z) + c/2) * scales[r], in float32) against the source, per row:
// out[2r] = sum (rec - x)^2, out[2r+1] = sum x^2 (float64, logical columns only); nonzero[2r] = any rec != 0,
// nonzero[2r+1] = any x != 0.
void launch_error_sums(const void* src, Source dtype, std::uint32_t rows, std::uint32_t cols, std::uint32_t vpr,
                       const std::uint8_t* coset, const std::int32_t* fields, const float* scales, double* out,
                       std::uint8_t* nonzero, cudaStream_t stream);

// Coding tables on the device: for table t, freq[off[t] + s] and cdf[off[t] + s] for symbol s (value sym_min[t] + s).
struct DeviceTables {
  const std::uint32_t* freq = nullptr;
  const std::uint32_t* cdf = nullptr;
  const int* off = nullptr;      // kTables
  const int* sym_min = nullptr;  // kTables
};

// rans::encode_fields' tiles: tile t codes vectors [t * tile_vectors, min(n, (t+1) * tile_vectors)) into
// scratch[t * capacity ...] (capacity >= 9 * tile_vectors words), its word count into words[t] and its 32 final
// states into states[32 t].
void launch_rans_tiles(const std::uint8_t* coset, const std::int32_t* fields, std::uint64_t n,
                       std::uint32_t tile_vectors, std::uint32_t tiles, std::uint32_t prob_bits, DeviceTables tables,
                       std::uint16_t* scratch, std::uint64_t capacity, std::uint32_t* words, std::uint32_t* states,
                       cudaStream_t stream);

// Packs each tile's words to payload[offsets[t] ...] (offsets: tiles + 1 entries on the device).
void launch_pack_words(const std::uint16_t* scratch, std::uint64_t capacity, std::uint32_t tiles,
                       const std::uint32_t* offsets, std::uint16_t* payload, cudaStream_t stream);

}  // namespace epk::cuda::enc
