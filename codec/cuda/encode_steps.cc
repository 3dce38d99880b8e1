#include "codec/cuda/encode_steps.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <string>
#include <utility>

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
  cudaStream_t stream = nullptr;
  // The source.
  Buffer src;
  enc::Source dtype = enc::Source::kF32;
  std::uint32_t rows = 0, cols = 0, padded = 0, vpr = 0;
  Buffer rms, row_max, bad_col;
  std::vector<float> host_rms;
  // The sample.
  Buffer row_map;
  bool sample_all = true;
  std::uint64_t sample_rows = 0;
  FieldSet sample, tensor;
  // Histograms, refit and error sums, the coder's buffers.
  Buffer range, ones, lo, base, hist, sums, scales, err, nonzero;
  Buffer freq, cdf, off, sym_min, scratch, words, states, offsets, payload;

  ~Impl() {
    if (stream) cudaStreamDestroy(stream);
  }

  // Quantises fs.n vectors of the source at scale into fs (row_map: the sample's rows, or none) and reads back the
  // table ranges and the coset-1 count.
  Status quantize(FieldSet& fs, const std::uint32_t* map, float s) {
    EPK_CUDA_TRY("fields", fs.coset.reserve(fs.n));
    EPK_CUDA_TRY("fields", fs.fields.reserve(fs.n * 32));
    EPK_CUDA_TRY("ranges", range.reserve(sizeof(fs.range)));
    EPK_CUDA_TRY("ranges", ones.reserve(sizeof(unsigned long long)));
    int init[2 * enc::kTables];
    for (int t = 0; t < enc::kTables; ++t) {
      init[2 * t] = INT_MAX;
      init[2 * t + 1] = INT_MIN;
    }
    EPK_CUDA_TRY("ranges", cudaMemcpyAsync(range.as<int>(), init, sizeof init, cudaMemcpyHostToDevice, stream));
    EPK_CUDA_TRY("ranges", cudaMemsetAsync(ones.as<void>(), 0, sizeof(unsigned long long), stream));
    enc::launch_quantize(src.as<void>(), dtype, cols, vpr, rms.as<float>(), map, fs.n, s, fs.coset.as<std::uint8_t>(),
                         fs.fields.as<std::int32_t>(), range.as<int>(), ones.as<unsigned long long>(), stream);
    EPK_CUDA_TRY("quantize", cudaGetLastError());
    EPK_CUDA_TRY("ranges", cudaMemcpyAsync(fs.range, range.as<int>(), sizeof fs.range, cudaMemcpyDeviceToHost, stream));
    EPK_CUDA_TRY("ranges", cudaMemcpyAsync(&fs.ones, ones.as<void>(), sizeof fs.ones, cudaMemcpyDeviceToHost, stream));
    EPK_CUDA_TRY("quantize", cudaStreamSynchronize(stream));
    return {};
  }

  // model::count_fields of fs, from its ranges and a device histogram.
  Result<model::FieldCounts> counts(const FieldSet& fs) {
    model::FieldCounts out;
    if (fs.n == 0) return out;
    const std::uint64_t seen1 = fs.ones, seen0 = fs.n - fs.ones;
    out[0].sym_min = 0;
    out[0].counts.assign(seen1 ? 2 : 1, 0);
    out[0].counts[0] = seen0;
    if (seen1) out[0].counts[1] = seen1;
    out[0].total = fs.n;
    int lo_h[enc::kTables] = {}, base_h[enc::kTables];
    std::uint32_t bins = 0;
    base_h[0] = -1;
    for (int t = 1; t < enc::kTables; ++t) {
      base_h[t] = -1;
      const int l = fs.range[2 * t], h = fs.range[2 * t + 1];
      if (l > h) continue;
      const std::uint64_t alphabet = std::uint64_t(std::int64_t(h) - l + 1);
      out[t].sym_min = l;
      out[t].counts.assign(alphabet, 0);
      lo_h[t] = l;
      if (alphabet <= kHistogramAlphabetLimit) {
        base_h[t] = int(bins);
        bins += std::uint32_t(alphabet);
      }
    }
    for (int t = 1; t < enc::kTables; ++t) out[t].total = (t - 1) & 1 ? seen1 : seen0;
    if (bins == 0) return out;
    EPK_CUDA_TRY("histogram", lo.reserve(sizeof lo_h));
    EPK_CUDA_TRY("histogram", base.reserve(sizeof base_h));
    EPK_CUDA_TRY("histogram", hist.reserve(std::size_t(bins) * 8));
    EPK_CUDA_TRY("histogram", cudaMemcpyAsync(lo.as<int>(), lo_h, sizeof lo_h, cudaMemcpyHostToDevice, stream));
    EPK_CUDA_TRY("histogram", cudaMemcpyAsync(base.as<int>(), base_h, sizeof base_h, cudaMemcpyHostToDevice, stream));
    EPK_CUDA_TRY("histogram", cudaMemsetAsync(hist.as<void>(), 0, std::size_t(bins) * 8, stream));
    enc::launch_histogram(fs.coset.as<std::uint8_t>(), fs.fields.as<std::int32_t>(), fs.n, lo.as<int>(),
                          base.as<int>(), bins, hist.as<unsigned long long>(), stream);
    EPK_CUDA_TRY("histogram", cudaGetLastError());
    std::vector<unsigned long long> h(bins);
    EPK_CUDA_TRY("histogram", cudaMemcpyAsync(h.data(), hist.as<void>(), std::size_t(bins) * 8,
                                              cudaMemcpyDeviceToHost, stream));
    EPK_CUDA_TRY("histogram", cudaStreamSynchronize(stream));
    for (int t = 1; t < enc::kTables; ++t) {
      if (base_h[t] < 0) continue;
      for (std::size_t i = 0; i < out[t].counts.size(); ++i) out[t].counts[i] = h[std::size_t(base_h[t]) + i];
    }
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
    EPK_CUDA_TRY("tables", freq.reserve(entries * 4));
    EPK_CUDA_TRY("tables", cdf.reserve(entries * 4));
    EPK_CUDA_TRY("tables", off.reserve(sizeof off_h));
    EPK_CUDA_TRY("tables", sym_min.reserve(sizeof min_h));
    EPK_CUDA_TRY("coder", scratch.reserve(tiles * capacity * 2));
    EPK_CUDA_TRY("coder", words.reserve(std::size_t(tiles) * 4));
    EPK_CUDA_TRY("coder", states.reserve(std::size_t(tiles) * 32 * 4));
    EPK_CUDA_TRY("coder", offsets.reserve((std::size_t(tiles) + 1) * 4));
    EPK_CUDA_TRY("tables", cudaMemcpyAsync(freq.as<void>(), f.data(), entries * 4, cudaMemcpyHostToDevice, stream));
    EPK_CUDA_TRY("tables", cudaMemcpyAsync(cdf.as<void>(), cum.data(), entries * 4, cudaMemcpyHostToDevice, stream));
    EPK_CUDA_TRY("tables", cudaMemcpyAsync(off.as<void>(), off_h, sizeof off_h, cudaMemcpyHostToDevice, stream));
    EPK_CUDA_TRY("tables", cudaMemcpyAsync(sym_min.as<void>(), min_h, sizeof min_h, cudaMemcpyHostToDevice, stream));
    enc::DeviceTables dt{freq.as<std::uint32_t>(), cdf.as<std::uint32_t>(), off.as<int>(), sym_min.as<int>()};
    enc::launch_rans_tiles(fs.coset.as<std::uint8_t>(), fs.fields.as<std::int32_t>(), fs.n, tile_vectors, tiles,
                           g.prob_bits, dt, scratch.as<std::uint16_t>(), capacity, words.as<std::uint32_t>(),
                           states.as<std::uint32_t>(), stream);
    EPK_CUDA_TRY("coder", cudaGetLastError());
    std::vector<std::uint32_t> counts(tiles);
    EPK_CUDA_TRY("coder", cudaMemcpyAsync(counts.data(), words.as<void>(), std::size_t(tiles) * 4,
                                          cudaMemcpyDeviceToHost, stream));
    EPK_CUDA_TRY("coder", cudaStreamSynchronize(stream));
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
    out.payload.resize(std::size_t(total));
    out.states.resize(std::size_t(tiles) * 32);
    EPK_CUDA_TRY("coder", payload.reserve(std::size_t(total) * 2));
    EPK_CUDA_TRY("coder", cudaMemcpyAsync(offsets.as<void>(), out.offsets.data(), out.offsets.size() * 4,
                                          cudaMemcpyHostToDevice, stream));
    enc::launch_pack_words(scratch.as<std::uint16_t>(), capacity, tiles, offsets.as<std::uint32_t>(),
                           payload.as<std::uint16_t>(), stream);
    EPK_CUDA_TRY("coder", cudaGetLastError());
    if (total) {
      EPK_CUDA_TRY("coder", cudaMemcpyAsync(out.payload.data(), payload.as<void>(), std::size_t(total) * 2,
                                            cudaMemcpyDeviceToHost, stream));
    }
    EPK_CUDA_TRY("coder", cudaMemcpyAsync(out.states.data(), states.as<void>(), out.states.size() * 4,
                                          cudaMemcpyDeviceToHost, stream));
    EPK_CUDA_TRY("coder", cudaStreamSynchronize(stream));
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
  return std::unique_ptr<DeviceSteps>(new DeviceSteps(std::move(impl)));
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
  EPK_CUDA_TRY("source", m.src.reserve(weights.size()));
  EPK_CUDA_TRY("source", m.rms.reserve(std::size_t(rows) * 4));
  EPK_CUDA_TRY("source", m.row_max.reserve(std::size_t(rows) * 4));
  EPK_CUDA_TRY("source", m.bad_col.reserve(std::size_t(rows) * 8));
  EPK_CUDA_TRY("source", cudaMemcpyAsync(m.src.as<void>(), weights.data(), weights.size(), cudaMemcpyHostToDevice,
                                         m.stream));
  enc::launch_row_stats(m.src.as<void>(), m.dtype, rows, cols, m.padded, m.rms.as<float>(), m.row_max.as<float>(),
                        m.bad_col.as<long long>(), m.stream);
  EPK_CUDA_TRY("row statistics", cudaGetLastError());
  rate::SourceStats st;
  st.rms.resize(rows);
  std::vector<float> row_max(rows);
  std::vector<long long> bad(rows);
  EPK_CUDA_TRY("row statistics", cudaMemcpyAsync(st.rms.data(), m.rms.as<void>(), std::size_t(rows) * 4,
                                                 cudaMemcpyDeviceToHost, m.stream));
  EPK_CUDA_TRY("row statistics", cudaMemcpyAsync(row_max.data(), m.row_max.as<void>(), std::size_t(rows) * 4,
                                                 cudaMemcpyDeviceToHost, m.stream));
  EPK_CUDA_TRY("row statistics", cudaMemcpyAsync(bad.data(), m.bad_col.as<void>(), std::size_t(rows) * 8,
                                                 cudaMemcpyDeviceToHost, m.stream));
  EPK_CUDA_TRY("row statistics", cudaStreamSynchronize(m.stream));
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
  if (Status s = m.quantize(m.sample, map, scale); !s) {
    sticky_ = s;
    return {};
  }
  auto c = m.counts(m.sample);
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
  EPK_TRY(m.quantize(m.sample, map, scale));
  rate::SampleCoded out;
  EPK_TRY_ASSIGN(out.counts, m.counts(m.sample));
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
  enc::launch_refit_sums(m.src.as<void>(), m.dtype, m.rows, m.cols, m.vpr, m.tensor.coset.as<std::uint8_t>(),
                         m.tensor.fields.as<std::int32_t>(), m.sums.as<double>(), m.stream);
  EPK_CUDA_TRY("refit", cudaGetLastError());
  std::vector<double> sums(std::size_t(m.rows) * 3);
  EPK_CUDA_TRY("refit", cudaMemcpyAsync(sums.data(), m.sums.as<void>(), sums.size() * 8, cudaMemcpyDeviceToHost,
                                        m.stream));
  EPK_CUDA_TRY("refit", cudaStreamSynchronize(m.stream));
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
  EPK_CUDA_TRY("error", cudaMemcpyAsync(m.scales.as<void>(), out.scales.data(), std::size_t(m.rows) * 4,
                                        cudaMemcpyHostToDevice, m.stream));
  enc::launch_error_sums(m.src.as<void>(), m.dtype, m.rows, m.cols, m.vpr, m.tensor.coset.as<std::uint8_t>(),
                         m.tensor.fields.as<std::int32_t>(), m.scales.as<float>(), m.err.as<double>(),
                         m.nonzero.as<std::uint8_t>(), m.stream);
  EPK_CUDA_TRY("error", cudaGetLastError());
  std::vector<double> err(std::size_t(m.rows) * 2);
  std::vector<std::uint8_t> nz(std::size_t(m.rows) * 2);
  EPK_CUDA_TRY("error", cudaMemcpyAsync(err.data(), m.err.as<void>(), err.size() * 8, cudaMemcpyDeviceToHost,
                                        m.stream));
  EPK_CUDA_TRY("error", cudaMemcpyAsync(nz.data(), m.nonzero.as<void>(), nz.size(), cudaMemcpyDeviceToHost,
                                        m.stream));
  EPK_CUDA_TRY("error", cudaStreamSynchronize(m.stream));
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
