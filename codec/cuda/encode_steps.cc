#include "codec/cuda/encode_steps.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "codec/cuda/encode_copy.h"
#include "codec/cuda/encode_kernels.h"
#include "codec/rans/encoder.h"

namespace epk::cuda {

namespace {

constexpr std::uint32_t kHistogramAlphabetLimit = 1u << model::kMaxProbBits;  // wider tables always overflow

Error cuda_error(const char* what, cudaError_t e) {
  return make_error(ErrorCode::kCuda, std::string("device encoder: ") + what + ": " + cudaGetErrorString(e));
}

// A grow-only device allocation.
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    if (p_) cudaFree(p_);
  }
  cudaError_t reserve(std::size_t bytes) {
    if (bytes <= size_) return cudaSuccess;
    if (p_) cudaFree(p_);
    p_ = nullptr;
    size_ = 0;
    const cudaError_t e = cudaMalloc(&p_, std::max<std::size_t>(bytes, 256));
    if (e == cudaSuccess) size_ = std::max<std::size_t>(bytes, 256);
    return e;
  }
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  void* p_ = nullptr;
  std::size_t size_ = 0;
};

#define EPK_CUDA_TRY(what, expr)                          \
  do {                                                    \
    if (const cudaError_t e_ = (expr); e_ != cudaSuccess) \
      return cuda_error(what, e_);                        \
  } while (0)

enc::Source source_of(DType t) {
  switch (t) {
    case DType::kBF16: return enc::Source::kBF16;
    case DType::kF16: return enc::Source::kF16;
    default: return enc::Source::kF32;
  }
}

// A set of fields on the device (the tensor's or the sample's) and what the last quantisation found of its ranges.
struct FieldSet {
  Buffer coset, fields;
  std::uint64_t n = 0;
  int range[2 * enc::kTables] = {};
  unsigned long long ones = 0;
};

// Where each table's counts sit in the device histogram (what launch_histogram_layout computes on the device from
// the same ranges): table t's value v at bin base[t] + v - lo[t]; base -1 for a table without bins (empty, or wider
// than any coding table: sized, not counted, as no caller reads its counts).
struct HistogramLayout {
  int lo[enc::kTables] = {};
  int base[enc::kTables] = {};
  std::uint32_t bins = 0;
};

HistogramLayout layout_of(const int* range) {
  HistogramLayout l;
  l.base[0] = -1;
  for (int t = 1; t < enc::kTables; ++t) {
    l.base[t] = -1;
    const int lo = range[2 * t], hi = range[2 * t + 1];
    if (lo > hi) continue;
    const std::uint64_t alphabet = std::uint64_t(std::int64_t(hi) - lo + 1);
    l.lo[t] = lo;
    if (alphabet <= kHistogramAlphabetLimit) {
      l.base[t] = int(l.bins);
      l.bins += std::uint32_t(alphabet);
    }
  }
  return l;
}

// Adds the scope's wall time to *sink.
class ScopedTimer {
 public:
  explicit ScopedTimer(double* sink) : sink_(sink), t0_(std::chrono::steady_clock::now()) {}
  ~ScopedTimer() { *sink_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }

 private:
  double* sink_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace

struct DeviceSteps::Impl {
  int device = 0;
  StepTimes* times = nullptr;
  cudaStream_t stream = nullptr;
  // The source: two buffers, the current tensor's and the one the prefetch thread fills on copy_stream.
  Buffer src_buf[2];
  int active = 0;
  cudaStream_t copy_stream = nullptr;
  std::thread prefetcher;
  const std::byte* pre_data = nullptr;
  std::size_t pre_size = 0;
  cudaError_t pre_error = cudaSuccess;
  const void* source() const { return src_buf[active].as<void>(); }
  enc::Source dtype = enc::Source::kF32;
  std::uint32_t rows = 0, cols = 0, padded = 0, vpr = 0;
  Buffer rms, row_max, bad_col;
  std::vector<float> host_rms;
  // The sample.
  Buffer row_map;
  bool sample_all = true;
  std::uint64_t sample_rows = 0;
  FieldSet sample, tensor;
  // Histograms, refit and error sums, the coder's buffers. `range` holds the table ranges (kTables pairs of int)
  // and, at kOnesAt, the coset-1 count; `lo_base` the histogram's lo[kTables], base[kTables] and its bins.
  static constexpr std::size_t kOnesAt = sizeof(int) * 2 * enc::kTables;
  static constexpr std::size_t kRangeBytes = kOnesAt + sizeof(unsigned long long);
  // lo[kTables], base[kTables] and the bins in all, as launch_histogram_layout writes them.
  static constexpr std::size_t kLoBaseBytes = sizeof(int) * (2 * enc::kTables + 1);
  // The histogram's most bins (every table but the cosets' as wide as the limit), and the bins the sample search's
  // one sync brings back with the ranges (a 4 bpp tensor's tables take about 500-1500).
  static constexpr std::size_t kHistogramMaxBins = std::size_t(enc::kTables - 1) * kHistogramAlphabetLimit;
  static constexpr std::size_t kHistogramPrefix = 4096;
  Buffer range, lo_base, hist, sums, scales, err, nonzero;
  // Pinned host sides of the small transfers, and the staged copiers of the large ones (one per host thread).
  PinnedBuffer pin_range, pin_lo_base, pin_hist, pin_rows, pin_words, pin_tables;
  StagedCopier copier, prefetch_copier;
  Buffer tables_dev, scratch, words, states, offsets, payload;

  ~Impl() {
    if (prefetcher.joinable()) prefetcher.join();
    if (stream) cudaStreamDestroy(stream);
    if (copy_stream) cudaStreamDestroy(copy_stream);
  }

  // True (and the spare buffer made current) when the prefetch thread copied exactly weights; a prefetch of other
  // bytes is left running (it writes the spare buffer only).
  bool take_prefetch(std::span<const std::byte> weights) {
    if (!prefetcher.joinable() || pre_data != weights.data() || pre_size != weights.size()) return false;
    prefetcher.join();
    const bool hit = pre_error == cudaSuccess;
    pre_data = nullptr;
    pre_size = 0;
    if (hit) active ^= 1;
    return hit;
  }

  // Starts the copy of weights into the spare buffer on copy_stream from the prefetch thread.
  void start_prefetch(std::span<const std::byte> weights) {
    if (prefetcher.joinable()) prefetcher.join();  // an earlier prefetch never taken: dropped
    pre_data = weights.data();
    pre_size = weights.size();
    pre_error = cudaSuccess;
    Buffer& spare = src_buf[active ^ 1];
    prefetcher = std::thread([this, &spare, weights] {
      cudaError_t e = cudaSetDevice(device);
      if (e == cudaSuccess) e = spare.reserve(weights.size());
      if (e == cudaSuccess) {
        e = prefetch_copier.to_device(spare.as<void>(), weights.data(), weights.size(), copy_stream);
      }
      pre_error = e;
    });
  }

  // n bytes between the device and host memory through pin_rows, synchronously.
  Status rows_to_host(void* dst, const void* src, std::size_t n) {
    EPK_CUDA_TRY("transfer", pin_rows.reserve(n));
    EPK_CUDA_TRY("transfer", cudaMemcpyAsync(pin_rows.as<void>(), src, n, cudaMemcpyDeviceToHost, stream));
    EPK_CUDA_TRY("transfer", cudaStreamSynchronize(stream));
    std::memcpy(dst, pin_rows.as<void>(), n);
    return {};
  }
  Status rows_to_device(void* dst, const void* src, std::size_t n) {
    EPK_CUDA_TRY("transfer", pin_rows.reserve(n));
    std::memcpy(pin_rows.as<void>(), src, n);
    EPK_CUDA_TRY("transfer", cudaMemcpyAsync(dst, pin_rows.as<void>(), n, cudaMemcpyHostToDevice, stream));
    EPK_CUDA_TRY("transfer", cudaStreamSynchronize(stream));
    return {};
  }

  // Starts quantising fs.n vectors of the source at scale into fs (row_map: the sample's rows, or none), the table
  // ranges and the coset-1 count folded into `range`.
  Status start_quantize(FieldSet& fs, const std::uint32_t* map, float s) {
    EPK_CUDA_TRY("fields", fs.coset.reserve(fs.n));
    EPK_CUDA_TRY("fields", fs.fields.reserve(fs.n * 32));
    EPK_CUDA_TRY("ranges", range.reserve(kRangeBytes));
    EPK_CUDA_TRY("ranges", pin_range.reserve(kRangeBytes));
    int* init = pin_range.as<int>();
    for (int t = 0; t < enc::kTables; ++t) {
      init[2 * t] = INT_MAX;
      init[2 * t + 1] = INT_MIN;
    }
    *reinterpret_cast<unsigned long long*>(pin_range.as<std::byte>() + kOnesAt) = 0;
    EPK_CUDA_TRY("ranges", cudaMemcpyAsync(range.as<void>(), init, kRangeBytes, cudaMemcpyHostToDevice, stream));
    enc::launch_quantize(source(), dtype, cols, vpr, rms.as<float>(), map, fs.n, s, fs.coset.as<std::uint8_t>(),
                         fs.fields.as<std::int32_t>(), range.as<int>(),
                         reinterpret_cast<unsigned long long*>(range.as<std::byte>() + kOnesAt), stream);
    EPK_CUDA_TRY("quantize", cudaGetLastError());
    return {};
  }
  // fs's ranges and coset-1 count from pin_range, once a sync has brought them there.
  void take_ranges(FieldSet& fs) {
    std::memcpy(fs.range, pin_range.as<int>(), sizeof fs.range);
    std::memcpy(&fs.ones, pin_range.as<std::byte>() + kOnesAt, sizeof fs.ones);
  }

  // Quantises fs (start_quantize) and reads back the table ranges and the coset-1 count.
  Status quantize(FieldSet& fs, const std::uint32_t* map, float s) {
    EPK_TRY(start_quantize(fs, map, s));
    EPK_CUDA_TRY("ranges", cudaMemcpyAsync(pin_range.as<void>(), range.as<void>(), kRangeBytes,
                                           cudaMemcpyDeviceToHost, stream));
    EPK_CUDA_TRY("quantize", cudaStreamSynchronize(stream));
    take_ranges(fs);
    return {};
  }

  // model::count_fields' shape for fs: the cosets' table counted from fs.ones, every other table sized by its range
  // and its counts still 0.
  static model::FieldCounts empty_counts(const FieldSet& fs) {
    model::FieldCounts out;
    const std::uint64_t seen1 = fs.ones, seen0 = fs.n - fs.ones;
    out[0].sym_min = 0;
    out[0].counts.assign(seen1 ? 2 : 1, 0);
    out[0].counts[0] = seen0;
    if (seen1) out[0].counts[1] = seen1;
    out[0].total = fs.n;
    for (int t = 1; t < enc::kTables; ++t) {
      const int l = fs.range[2 * t], h = fs.range[2 * t + 1];
      out[t].total = (t - 1) & 1 ? seen1 : seen0;
      if (l > h) continue;
      out[t].sym_min = l;
      out[t].counts.assign(std::uint64_t(std::int64_t(h) - l + 1), 0);
    }
    return out;
  }
  static void fill_counts(model::FieldCounts& out, const HistogramLayout& layout, const unsigned long long* h) {
    for (int t = 1; t < enc::kTables; ++t) {
      if (layout.base[t] < 0) continue;
      for (std::size_t i = 0; i < out[t].counts.size(); ++i) out[t].counts[i] = h[std::size_t(layout.base[t]) + i];
    }
  }

  // model::count_fields of fs, from its ranges and a device histogram.
  Result<model::FieldCounts> counts(const FieldSet& fs) {
    if (fs.n == 0) return model::FieldCounts{};
    model::FieldCounts out = empty_counts(fs);
    const HistogramLayout layout = layout_of(fs.range);
    if (layout.bins == 0) return out;
    const std::uint32_t bins = layout.bins;
    EPK_CUDA_TRY("histogram", lo_base.reserve(kLoBaseBytes));
    EPK_CUDA_TRY("histogram", pin_lo_base.reserve(kLoBaseBytes));
    EPK_CUDA_TRY("histogram", hist.reserve(std::size_t(bins) * 8));
    EPK_CUDA_TRY("histogram", pin_hist.reserve(std::size_t(bins) * 8));
    std::memcpy(pin_lo_base.as<int>(), layout.lo, sizeof layout.lo);
    std::memcpy(pin_lo_base.as<int>() + enc::kTables, layout.base, sizeof layout.base);
    EPK_CUDA_TRY("histogram", cudaMemcpyAsync(lo_base.as<void>(), pin_lo_base.as<void>(), 2 * sizeof layout.lo,
                                              cudaMemcpyHostToDevice, stream));
    EPK_CUDA_TRY("histogram", cudaMemsetAsync(hist.as<void>(), 0, std::size_t(bins) * 8, stream));
    enc::launch_histogram(fs.coset.as<std::uint8_t>(), fs.fields.as<std::int32_t>(), fs.n, lo_base.as<int>(),
                          lo_base.as<int>() + enc::kTables, bins, hist.as<unsigned long long>(), stream);
    EPK_CUDA_TRY("histogram", cudaGetLastError());
    EPK_CUDA_TRY("histogram", cudaMemcpyAsync(pin_hist.as<void>(), hist.as<void>(), std::size_t(bins) * 8,
                                              cudaMemcpyDeviceToHost, stream));
    EPK_CUDA_TRY("histogram", cudaStreamSynchronize(stream));
    fill_counts(out, layout, pin_hist.as<unsigned long long>());
    return out;
  }

  // quantize(fs, map, s) then counts(fs) with one stream sync, where the histogram's layout fits kHistogramPrefix
  // bins (a second otherwise): the layout is computed on the device from the ranges (launch_histogram_layout) and
  // checked against the host's. The sample search runs this at each step.
  Result<model::FieldCounts> quantize_counts(FieldSet& fs, const std::uint32_t* map, float s) {
    if (fs.n == 0) {
      EPK_TRY(quantize(fs, map, s));
      return counts(fs);
    }
    EPK_TRY(start_quantize(fs, map, s));
    EPK_CUDA_TRY("histogram", lo_base.reserve(kLoBaseBytes));
    EPK_CUDA_TRY("histogram", pin_lo_base.reserve(kLoBaseBytes));
    EPK_CUDA_TRY("histogram", hist.reserve(kHistogramMaxBins * 8));
    EPK_CUDA_TRY("histogram", pin_hist.reserve(kHistogramPrefix * 8));
    enc::launch_histogram_layout(range.as<int>(), kHistogramAlphabetLimit, lo_base.as<int>(),
                                 hist.as<unsigned long long>(), stream);
    enc::launch_histogram_laid_out(fs.coset.as<std::uint8_t>(), fs.fields.as<std::int32_t>(), fs.n,
                                   lo_base.as<int>(), hist.as<unsigned long long>(), stream);
    EPK_CUDA_TRY("histogram", cudaGetLastError());
    EPK_CUDA_TRY("ranges", cudaMemcpyAsync(pin_range.as<void>(), range.as<void>(), kRangeBytes,
                                           cudaMemcpyDeviceToHost, stream));
    EPK_CUDA_TRY("histogram", cudaMemcpyAsync(pin_lo_base.as<void>(), lo_base.as<void>(), kLoBaseBytes,
                                              cudaMemcpyDeviceToHost, stream));
    EPK_CUDA_TRY("histogram", cudaMemcpyAsync(pin_hist.as<void>(), hist.as<void>(), kHistogramPrefix * 8,
                                              cudaMemcpyDeviceToHost, stream));
    EPK_CUDA_TRY("histogram", cudaStreamSynchronize(stream));
    take_ranges(fs);
    const HistogramLayout layout = layout_of(fs.range);
    const int* on_device = pin_lo_base.as<int>();
    bool same = std::uint32_t(on_device[2 * enc::kTables]) == layout.bins;
    for (int t = 1; t < enc::kTables; ++t) {
      same = same && on_device[enc::kTables + t] == layout.base[t] &&
             (layout.base[t] < 0 || on_device[t] == layout.lo[t]);
    }
    if (!same) {
      return make_error(ErrorCode::kInternal, "device encoder: the device's histogram layout is not the host's");
    }
    model::FieldCounts out = empty_counts(fs);
    if (layout.bins > kHistogramPrefix) {
      EPK_CUDA_TRY("histogram", pin_hist.reserve(std::size_t(layout.bins) * 8));
      EPK_CUDA_TRY("histogram", cudaMemcpyAsync(pin_hist.as<void>(), hist.as<void>(), std::size_t(layout.bins) * 8,
                                                cudaMemcpyDeviceToHost, stream));
      EPK_CUDA_TRY("histogram", cudaStreamSynchronize(stream));
    }
    fill_counts(out, layout, pin_hist.as<unsigned long long>());
    return out;
  }

  // rans::encode_fields of fs under counts, with the tensor's shape in g.
  Result<rans::EncodedTensor> code(const FieldSet& fs, const model::FieldCounts& c, std::vector<float> row_scales,
                                   const rans::EncodeGeometry& g) {
    if (g.prob_bits < std::uint32_t(model::kMinProbBits) || g.prob_bits > std::uint32_t(model::kMaxProbBits)) {
      return make_error(ErrorCode::kInvalidArgument, "encode_fields: prob_bits " + std::to_string(g.prob_bits));
    }
    if (g.tile_symbols == 0) return make_error(ErrorCode::kInvalidArgument, "encode_fields: tile_symbols 0");
    rans::EncodedTensor out;
    out.rows = g.rows;
    out.cols = g.cols;
    out.padded_cols = (g.cols + 7) / 8 * 8;
    out.prob_bits = g.prob_bits;
    out.tile_symbols = g.tile_symbols;
    out.dtype = g.dtype;
    if (row_scales.size() != g.rows) {
      return make_error(ErrorCode::kInvalidArgument, "encode_fields: " + std::to_string(row_scales.size()) +
                                                         " row scales for " + std::to_string(g.rows) + " rows");
    }
    out.scales = std::move(row_scales);
    EPK_TRY(rans::build_tables(c, g.prob_bits, out));
    // Device tables: frequencies and cumulative frequencies per table, laid out as freq_tables.
    const std::size_t entries = std::max<std::size_t>(out.freq_tables.size(), 1);
    std::vector<std::uint32_t> f(entries, 0), cum(entries, 0);
    int off_h[enc::kTables], min_h[enc::kTables];
    for (int t = 0; t < enc::kTables; ++t) {
      const rans::TableMeta& m = out.tables[std::size_t(t)];
      off_h[t] = m.freq_offset;
      min_h[t] = m.sym_min;
      std::uint32_t running = 0;
      for (std::int32_t i = 0; i < (m.n_symbols ? m.alphabet : 0); ++i) {
        f[std::size_t(m.freq_offset + i)] = out.freq_tables[std::size_t(m.freq_offset + i)];
        cum[std::size_t(m.freq_offset + i)] = running;
        running += out.freq_tables[std::size_t(m.freq_offset + i)];
      }
    }
    const std::uint32_t tile_vectors = model::vectors_per_tile(g.tile_symbols);
    const std::uint64_t tiles64 = std::max<std::uint64_t>(1, (fs.n + tile_vectors - 1) / tile_vectors);
    if (tiles64 > 0xffffffffull) return make_error(ErrorCode::kInvalidArgument, "encode_fields: too many tiles");
    const auto tiles = std::uint32_t(tiles64);
    const std::uint64_t capacity = std::uint64_t(tile_vectors) * 9;
    EPK_CUDA_TRY("coder", scratch.reserve(tiles * capacity * 2));
    EPK_CUDA_TRY("coder", words.reserve(std::size_t(tiles) * 4));
    EPK_CUDA_TRY("coder", states.reserve(std::size_t(tiles) * 32 * 4));
    EPK_CUDA_TRY("coder", offsets.reserve((std::size_t(tiles) + 1) * 4));
    // One upload: freq[entries], cdf[entries], off[kTables], sym_min[kTables].
    const std::size_t table_bytes = (2 * entries + 2 * enc::kTables) * 4;
    EPK_CUDA_TRY("tables", tables_dev.reserve(table_bytes));
    EPK_CUDA_TRY("tables", pin_tables.reserve(table_bytes));
    std::uint32_t* pt = pin_tables.as<std::uint32_t>();
    std::memcpy(pt, f.data(), entries * 4);
    std::memcpy(pt + entries, cum.data(), entries * 4);
    std::memcpy(pt + 2 * entries, off_h, sizeof off_h);
    std::memcpy(pt + 2 * entries + enc::kTables, min_h, sizeof min_h);
    EPK_CUDA_TRY("tables", cudaMemcpyAsync(tables_dev.as<void>(), pt, table_bytes, cudaMemcpyHostToDevice, stream));
    const std::uint32_t* td = tables_dev.as<std::uint32_t>();
    enc::DeviceTables dt{td, td + entries, reinterpret_cast<const int*>(td + 2 * entries),
                         reinterpret_cast<const int*>(td + 2 * entries + enc::kTables)};
    enc::launch_rans_tiles(fs.coset.as<std::uint8_t>(), fs.fields.as<std::int32_t>(), fs.n, tile_vectors, tiles,
                           g.prob_bits, dt, scratch.as<std::uint16_t>(), capacity, words.as<std::uint32_t>(),
                           states.as<std::uint32_t>(), stream);
    EPK_CUDA_TRY("coder", cudaGetLastError());
    EPK_CUDA_TRY("coder", pin_words.reserve(std::size_t(tiles) * 4));
    EPK_CUDA_TRY("coder", cudaMemcpyAsync(pin_words.as<void>(), words.as<void>(), std::size_t(tiles) * 4,
                                          cudaMemcpyDeviceToHost, stream));
    EPK_CUDA_TRY("coder", cudaStreamSynchronize(stream));
    const std::uint32_t* counts = pin_words.as<std::uint32_t>();
    out.offsets.resize(std::size_t(tiles) + 1);
    std::uint64_t total = 0;
    out.offsets[0] = 0;
    for (std::uint32_t t = 0; t < tiles; ++t) {
      total += counts[t];
      if (total > 0xffffffffull) {
        return make_error(ErrorCode::kInvalidArgument, "encode_fields: payload exceeds 2^32 words");
      }
      out.offsets[t + 1] = std::uint32_t(total);
    }
    ScopedTimer download_timer(&times->download);
    // Faulting the payload's host memory in was most of its download: PayloadWords takes a block used before where
    // the process has one (its writer gave the last payload's back), faults a fresh one in huge pages where the
    // kernel gives them, and writes nothing on resize(), so the copier's threads fault in what is fresh together
    // (docs/NOTES.md, "Codec: the GPU encoder").
    out.payload.resize(std::size_t(total));
    out.states.resize(std::size_t(tiles) * 32);
    EPK_CUDA_TRY("coder", payload.reserve(std::size_t(total) * 2));
    EPK_CUDA_TRY("coder", pin_words.reserve(out.offsets.size() * 4));
    std::memcpy(pin_words.as<void>(), out.offsets.data(), out.offsets.size() * 4);
    EPK_CUDA_TRY("coder", cudaMemcpyAsync(offsets.as<void>(), pin_words.as<void>(), out.offsets.size() * 4,
                                          cudaMemcpyHostToDevice, stream));
    enc::launch_pack_words(scratch.as<std::uint16_t>(), capacity, tiles, offsets.as<std::uint32_t>(),
                           payload.as<std::uint16_t>(), stream);
    EPK_CUDA_TRY("coder", cudaGetLastError());
    if (total) {
      EPK_CUDA_TRY("coder", copier.to_host(out.payload.data(), payload.as<void>(), std::size_t(total) * 2, stream));
    }
    EPK_CUDA_TRY("coder", copier.to_host(out.states.data(), states.as<void>(), out.states.size() * 4, stream));
    return out;
  }
};

DeviceSteps::DeviceSteps(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DeviceSteps::~DeviceSteps() = default;

bool DeviceSteps::supports(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16;
}

Result<std::unique_ptr<DeviceSteps>> DeviceSteps::create(int device) {
  auto impl = std::make_unique<Impl>();
  impl->device = device;
  EPK_CUDA_TRY("set device", cudaSetDevice(device));
  EPK_CUDA_TRY("stream", cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking));
  EPK_CUDA_TRY("stream", cudaStreamCreateWithFlags(&impl->copy_stream, cudaStreamNonBlocking));
  auto steps = std::unique_ptr<DeviceSteps>(new DeviceSteps(std::move(impl)));
  steps->impl_->times = &steps->times_;
  return steps;
}

Result<rate::SourceStats> DeviceSteps::load(std::span<const std::byte> weights, std::uint32_t rows,
                                            std::uint32_t cols, DType dtype) {
  ScopedTimer timer(&times_.load);
  Impl& m = *impl_;
  sticky_ = {};
  last_error_.reset();
  if (!supports(dtype)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "device encoder: source dtype " + std::string(dtype_name(dtype)) + " (F32, BF16, F16 only)");
  }
  EPK_CUDA_TRY("set device", cudaSetDevice(m.device));
  m.dtype = source_of(dtype);
  m.rows = rows;
  m.cols = cols;
  m.padded = (cols + 7) / 8 * 8;
  m.vpr = m.padded / 8;
  m.tensor.n = std::uint64_t(rows) * m.vpr;
  {
    ScopedTimer upload_timer(&times_.upload);
    const bool prefetched = m.take_prefetch(weights);
    EPK_CUDA_TRY("source", m.rms.reserve(std::size_t(rows) * 4));
    EPK_CUDA_TRY("source", m.row_max.reserve(std::size_t(rows) * 4));
    EPK_CUDA_TRY("source", m.bad_col.reserve(std::size_t(rows) * 8));
    if (!prefetched) {
      EPK_CUDA_TRY("source", m.src_buf[m.active].reserve(weights.size()));
      EPK_CUDA_TRY("source", m.copier.to_device(m.src_buf[m.active].as<void>(), weights.data(), weights.size(),
                                                m.stream));
    }
  }
  // The next tensor's copy runs while this one is encoded (not when it is this one, or already on its way).
  if (next_size_ && next_data_ != weights.data() && !(m.prefetcher.joinable() && m.pre_data == next_data_)) {
    m.start_prefetch({next_data_, next_size_});
  }
  enc::launch_row_stats(m.source(), m.dtype, rows, cols, m.padded, m.rms.as<float>(), m.row_max.as<float>(),
                        m.bad_col.as<long long>(), m.stream);
  EPK_CUDA_TRY("row statistics", cudaGetLastError());
  rate::SourceStats st;
  st.rms.resize(rows);
  std::vector<float> row_max(rows);
  std::vector<long long> bad(rows);
  EPK_TRY(m.rows_to_host(st.rms.data(), m.rms.as<void>(), std::size_t(rows) * 4));
  EPK_TRY(m.rows_to_host(row_max.data(), m.row_max.as<void>(), std::size_t(rows) * 4));
  EPK_TRY(m.rows_to_host(bad.data(), m.bad_col.as<void>(), std::size_t(rows) * 8));
  for (std::uint32_t r = 0; r < rows; ++r) {
    if (bad[r] >= 0) {
      st.bad_row = r;
      st.bad_col = bad[r];
      break;
    }
  }
  st.max_abs = *std::max_element(row_max.begin(), row_max.end());
  m.host_rms = st.rms;
  return st;
}

void DeviceSteps::prefetch_next(std::span<const std::byte> next) {
  next_data_ = next.data();
  next_size_ = next.size();
}

Status DeviceSteps::set_sample(const std::vector<std::uint32_t>& sample) {
  Impl& m = *impl_;
  m.sample_rows = sample.size();
  m.sample_all = sample.size() >= m.rows;
  m.sample.n = std::uint64_t(sample.size()) * m.vpr;
  if (!m.sample_all) {
    EPK_CUDA_TRY("sample", m.row_map.reserve(sample.size() * 4));
    EPK_CUDA_TRY("sample", cudaMemcpyAsync(m.row_map.as<void>(), sample.data(), sample.size() * 4,
                                           cudaMemcpyHostToDevice, m.stream));
  }
  return {};
}

model::FieldCounts DeviceSteps::sample_counts(float scale) {
  ScopedTimer timer(&times_.sample);
  ++times_.calls_sample;
  Impl& m = *impl_;
  if (!sticky_) return {};
  const std::uint32_t* map = m.sample_all ? nullptr : m.row_map.as<std::uint32_t>();
  auto c = m.quantize_counts(m.sample, map, scale);
  if (!c) {
    sticky_ = Status(c.error());
    return {};
  }
  return std::move(*c);
}

Result<rate::SampleCoded> DeviceSteps::sample_code(float scale, std::uint32_t cols, int prob_bits,
                                                   std::uint32_t tile_symbols) {
  ScopedTimer timer(&times_.sample);
  ++times_.calls_sample;
  Impl& m = *impl_;
  EPK_TRY(sticky_);
  const std::uint32_t* map = m.sample_all ? nullptr : m.row_map.as<std::uint32_t>();
  rate::SampleCoded out;
  EPK_TRY_ASSIGN(out.counts, m.quantize_counts(m.sample, map, scale));
  rans::EncodeGeometry g{std::uint32_t(m.sample_rows), cols, std::uint32_t(prob_bits), tile_symbols, DType::kF32};
  EPK_TRY_ASSIGN(out.coded, m.code(m.sample, out.counts, std::vector<float>(m.sample_rows, 1.0f), g));
  return out;
}

Status DeviceSteps::quantize(float scale) {
  ScopedTimer timer(&times_.quantize);
  ++times_.calls_quantize;
  EPK_TRY(sticky_);
  return impl_->quantize(impl_->tensor, nullptr, scale);
}

model::FieldCounts DeviceSteps::counts() {
  ScopedTimer timer(&times_.counts);
  if (!sticky_) return {};
  auto c = impl_->counts(impl_->tensor);
  if (!c) {
    sticky_ = Status(c.error());
    return {};
  }
  return std::move(*c);
}

Status DeviceSteps::refit(double scale, std::vector<float>& scales, std::vector<double>* row_sse) {
  ScopedTimer timer(&times_.refit);
  Impl& m = *impl_;
  EPK_TRY(sticky_);
  EPK_CUDA_TRY("refit", m.sums.reserve(std::size_t(m.rows) * 24));
  enc::launch_refit_sums(m.source(), m.dtype, m.rows, m.cols, m.vpr, m.tensor.coset.as<std::uint8_t>(),
                         m.tensor.fields.as<std::int32_t>(), m.sums.as<double>(), m.stream);
  EPK_CUDA_TRY("refit", cudaGetLastError());
  std::vector<double> sums(std::size_t(m.rows) * 3);
  EPK_TRY(m.rows_to_host(sums.data(), m.sums.as<void>(), sums.size() * 8));
  // refit_rows' per-row arithmetic, on the host.
  constexpr double kMinScale = 1e-12;
  scales.resize(m.rows);
  if (row_sse) row_sse->resize(m.rows);
  for (std::uint32_t r = 0; r < m.rows; ++r) {
    const double num = sums[3 * std::size_t(r)], den = sums[3 * std::size_t(r) + 1];
    const double energy = sums[3 * std::size_t(r) + 2];
    if (den > 0.0) {
      scales[r] = float(std::max(num / den, kMinScale));
      if (row_sse) (*row_sse)[r] = std::max(0.0, energy - num * num / den);
    } else {
      scales[r] = float(scale) * m.host_rms[r];
      if (row_sse) (*row_sse)[r] = energy;
    }
  }
  return {};
}

Result<rans::EncodedTensor> DeviceSteps::code(std::vector<float> scales, const rans::EncodeGeometry& g) {
  Impl& m = *impl_;
  EPK_TRY(sticky_);
  last_error_.reset();
  if (g.rows != m.rows || g.cols != m.cols) {
    return make_error(ErrorCode::kInvalidArgument, "device encoder: geometry " + std::to_string(g.rows) + "x" +
                                                       std::to_string(g.cols) + " for a loaded " +
                                                       std::to_string(m.rows) + "x" + std::to_string(m.cols));
  }
  rans::EncodedTensor out;
  {
    ScopedTimer timer(&times_.code);
    EPK_TRY_ASSIGN(model::FieldCounts c, m.counts(m.tensor));
    EPK_TRY_ASSIGN(out, m.code(m.tensor, c, std::move(scales), g));
  }
  ScopedTimer timer(&times_.error);
  // The reconstruction against the source (rate::ReconstructionError), from the fields just coded.
  EPK_CUDA_TRY("error", m.scales.reserve(std::size_t(m.rows) * 4));
  EPK_CUDA_TRY("error", m.err.reserve(std::size_t(m.rows) * 16));
  EPK_CUDA_TRY("error", m.nonzero.reserve(std::size_t(m.rows) * 2));
  EPK_TRY(m.rows_to_device(m.scales.as<void>(), out.scales.data(), std::size_t(m.rows) * 4));
  enc::launch_error_sums(m.source(), m.dtype, m.rows, m.cols, m.vpr, m.tensor.coset.as<std::uint8_t>(),
                         m.tensor.fields.as<std::int32_t>(), m.scales.as<float>(), m.err.as<double>(),
                         m.nonzero.as<std::uint8_t>(), m.stream);
  EPK_CUDA_TRY("error", cudaGetLastError());
  std::vector<double> err(std::size_t(m.rows) * 2);
  std::vector<std::uint8_t> nz(std::size_t(m.rows) * 2);
  EPK_TRY(m.rows_to_host(err.data(), m.err.as<void>(), err.size() * 8));
  EPK_TRY(m.rows_to_host(nz.data(), m.nonzero.as<void>(), nz.size()));
  rate::ReconstructionError e;
  for (std::uint32_t r = 0; r < m.rows; ++r) {
    e.sse += err[2 * std::size_t(r)];
    e.source_energy += err[2 * std::size_t(r) + 1];
    e.decoded_zero = e.decoded_zero && !nz[2 * std::size_t(r)];
    e.source_zero = e.source_zero && !nz[2 * std::size_t(r) + 1];
  }
  last_error_ = e;
  return out;
}

Status DeviceSteps::fields_changed() {
  return make_error(ErrorCode::kUnsupported, "device encoder: host changes to the fields are not supported");
}

lattice::QuantizedFields DeviceSteps::download_fields() {
  Impl& m = *impl_;
  lattice::QuantizedFields q;
  q.resize(m.tensor.n);
  if (cudaMemcpy(q.coset.data(), m.tensor.coset.as<void>(), m.tensor.n, cudaMemcpyDeviceToHost) != cudaSuccess ||
      cudaMemcpy(q.fields.data(), m.tensor.fields.as<void>(), m.tensor.n * 32, cudaMemcpyDeviceToHost) !=
          cudaSuccess) {
    q.resize(0);
  }
  return q;
}

}  // namespace epk::cuda
