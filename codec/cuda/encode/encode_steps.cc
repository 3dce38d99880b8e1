#include "codec/cuda/encode/encode_steps.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "codec/cuda/encode/encode_coder.h"
#include "codec/cuda/encode/encode_copy.h"
#include "codec/cuda/encode/encode_device.h"
#include "codec/cuda/encode/encode_fields.h"
#include "codec/cuda/encode/encode_kernels.h"
#include "codec/cuda/encode/encode_source.h"

namespace epk::cuda {

namespace {

enc::Source source_of(DType t) {
  switch (t) {
    case DType::kBF16: return enc::Source::kBF16;
    case DType::kF16: return enc::Source::kF16;
    default: return enc::Source::kF32;
  }
}

}  // namespace

struct DeviceSteps::Impl {
  int device = 0;
  cudaStream_t stream = nullptr;
  // The encoding thread's copier: the sample's upload, the payload's download, a source copied on this thread.
  StagedCopier copier;
  std::unique_ptr<EncoderSource> source;
  std::unique_ptr<FieldCounter> fields;
  std::unique_ptr<TileCoder> coder;
  enc::Source dtype = enc::Source::kF32;
  std::uint32_t rows = 0, cols = 0, padded = 0, vpr = 0;
  const void* whole = nullptr;  // the tensor's bytes on the device, once source_stats() has them
  // Row statistics: the tensor's rms and the sample's (kept for the search: the tensor's when the sample is every
  // row), each row's largest |x| and first non-finite column, read back through pin_rows in one sync.
  DeviceBuffer rms, sample_rms, row_max, bad_col;
  const float* sample_rms_of = nullptr;
  PinnedBuffer pin_rows;
  std::optional<rate::SourceStats> stats;  // the loaded tensor's, once known
  std::uint64_t sample_rows = 0;
  FieldSet sample, tensor;
  DeviceBuffer sums, scales, err, nonzero;

  ~Impl() {
    // The helper thread and the pinned buffers go before the stream they use.
    source.reset();
    coder.reset();
    fields.reset();
    if (stream) cudaStreamDestroy(stream);
  }

  // The steps that read the whole tensor follow source_stats().
  Status need_whole() const {
    if (!whole) return make_error(ErrorCode::kInternal, "device encoder: a step on the tensor before source_stats");
    return {};
  }

  QuantizeSource sample_source() const { return {source->sample(), dtype, cols, vpr, sample_rms_of}; }
  QuantizeSource tensor_source() const { return {whole, dtype, cols, vpr, rms.as<float>()}; }

  // What row_stats reads back: each row's largest |x| and first non-finite column (-1: none), and its rms when asked.
  struct HostRows {
    std::vector<float> rms, max_abs;
    std::vector<long long> bad;
  };

  // Row statistics of n rows at src: rms into rms_out on the device, the rest (and the rms, with_rms) into out, in
  // one sync.
  Status row_stats(const void* src, std::uint32_t n, float* rms_out, bool with_rms, HostRows& out) {
    out.max_abs.assign(n, 0.0f);
    out.bad.assign(n, -1);
    out.rms.assign(with_rms ? n : 0, 0.0f);
    if (n == 0) return {};
    EPK_ENC_CUDA_TRY("row statistics", row_max.reserve(std::size_t(n) * 4));
    EPK_ENC_CUDA_TRY("row statistics", bad_col.reserve(std::size_t(n) * 8));
    EPK_ENC_CUDA_TRY("row statistics", pin_rows.reserve(std::size_t(n) * 16));
    enc::launch_row_stats(src, dtype, n, cols, padded, rms_out, row_max.as<float>(), bad_col.as<long long>(),
                          stream);
    EPK_ENC_CUDA_TRY("row statistics", cudaGetLastError());
    auto* pinned = pin_rows.as<std::byte>();
    const std::size_t at_max = std::size_t(n) * 8, at_rms = std::size_t(n) * 12;
    EPK_ENC_CUDA_TRY("row statistics", cudaMemcpyAsync(pinned, bad_col.as<void>(), std::size_t(n) * 8,
                                                       cudaMemcpyDeviceToHost, stream));
    EPK_ENC_CUDA_TRY("row statistics", cudaMemcpyAsync(pinned + at_max, row_max.as<void>(), std::size_t(n) * 4,
                                                       cudaMemcpyDeviceToHost, stream));
    if (with_rms) {
      EPK_ENC_CUDA_TRY("row statistics", cudaMemcpyAsync(pinned + at_rms, rms_out, std::size_t(n) * 4,
                                                         cudaMemcpyDeviceToHost, stream));
    }
    EPK_ENC_CUDA_TRY("row statistics", cudaStreamSynchronize(stream));
    std::memcpy(out.bad.data(), pinned, std::size_t(n) * 8);
    std::memcpy(out.max_abs.data(), pinned + at_max, std::size_t(n) * 4);
    if (with_rms) std::memcpy(out.rms.data(), pinned + at_rms, std::size_t(n) * 4);
    return {};
  }

  // The tensor's statistics from its rows' (with their rms).
  static rate::SourceStats source_stats_of(HostRows&& h) {
    rate::SourceStats st;
    for (std::size_t r = 0; r < h.bad.size(); ++r) {
      if (h.bad[r] >= 0) {
        st.bad_row = std::int64_t(r);
        st.bad_col = h.bad[r];
        break;
      }
    }
    st.max_abs = h.max_abs.empty() ? 0.0f : *std::max_element(h.max_abs.begin(), h.max_abs.end());
    st.rms = std::move(h.rms);
    return st;
  }

  // n bytes between the device and host memory through pin_rows, synchronously.
  Status rows_to_host(void* dst, const void* src, std::size_t n) {
    EPK_ENC_CUDA_TRY("transfer", pin_rows.reserve(n));
    EPK_ENC_CUDA_TRY("transfer", cudaMemcpyAsync(pin_rows.as<void>(), src, n, cudaMemcpyDeviceToHost, stream));
    EPK_ENC_CUDA_TRY("transfer", cudaStreamSynchronize(stream));
    std::memcpy(dst, pin_rows.as<void>(), n);
    return {};
  }
  Status rows_to_device(void* dst, const void* src, std::size_t n) {
    EPK_ENC_CUDA_TRY("transfer", pin_rows.reserve(n));
    std::memcpy(pin_rows.as<void>(), src, n);
    EPK_ENC_CUDA_TRY("transfer", cudaMemcpyAsync(dst, pin_rows.as<void>(), n, cudaMemcpyHostToDevice, stream));
    EPK_ENC_CUDA_TRY("transfer", cudaStreamSynchronize(stream));
    return {};
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
  EPK_ENC_CUDA_TRY("set device", cudaSetDevice(device));
  EPK_ENC_CUDA_TRY("stream", cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking));
  EPK_TRY_ASSIGN(impl->source, EncoderSource::create(device, impl->stream, impl->copier));
  impl->fields = std::make_unique<FieldCounter>(impl->stream);
  impl->coder = std::make_unique<TileCoder>(impl->stream, impl->copier);
  return std::unique_ptr<DeviceSteps>(new DeviceSteps(std::move(impl)));
}

Result<rate::SampleStats> DeviceSteps::load(std::span<const std::byte> weights, std::uint32_t rows,
                                            std::uint32_t cols, DType dtype,
                                            const std::vector<std::uint32_t>& sample) {
  ScopedTimer timer(&times_.load);
  Impl& m = *impl_;
  sticky_ = {};
  last_error_.reset();
  m.whole = nullptr;
  m.stats.reset();
  if (!supports(dtype)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "device encoder: source dtype " + std::string(dtype_name(dtype)) + " (F32, BF16, F16 only)");
  }
  EPK_TRY(rate::check_sample_rows(sample, rows));
  EPK_ENC_CUDA_TRY("set device", cudaSetDevice(m.device));
  m.dtype = source_of(dtype);
  m.rows = rows;
  m.cols = cols;
  m.padded = (cols + 7) / 8 * 8;
  m.vpr = m.padded / 8;
  m.tensor.n = std::uint64_t(rows) * m.vpr;
  m.sample_rows = sample.size();
  m.sample.n = std::uint64_t(sample.size()) * m.vpr;
  const double uploaded = m.source->upload_seconds();
  const Status loaded = m.source->load(weights, std::size_t(cols) * std::size_t(dtype_bits(dtype) / 8), sample);
  times_.upload += m.source->upload_seconds() - uploaded;
  EPK_TRY(loaded);
  // A sample of every row is the tensor: its statistics are the tensor's, computed once.
  const bool whole = m.source->sample_is_whole();
  DeviceBuffer& rms = whole ? m.rms : m.sample_rms;
  EPK_ENC_CUDA_TRY("row statistics", rms.reserve(sample.size() * 4));
  m.sample_rms_of = rms.as<float>();
  Impl::HostRows rows_read;
  EPK_TRY(m.row_stats(m.source->sample(), std::uint32_t(sample.size()), rms.as<float>(), whole, rows_read));
  rate::SampleStats st;
  st.finite = std::all_of(rows_read.bad.begin(), rows_read.bad.end(), [](long long b) { return b < 0; });
  st.max_abs = rows_read.max_abs.empty() ? 0.0f
                                         : *std::max_element(rows_read.max_abs.begin(), rows_read.max_abs.end());
  if (whole) m.stats = Impl::source_stats_of(std::move(rows_read));
  return st;
}

Result<rate::SourceStats> DeviceSteps::source_stats() {
  ScopedTimer timer(&times_.load);
  Impl& m = *impl_;
  const double uploaded = m.source->upload_seconds();
  auto whole = m.source->whole();
  times_.upload += m.source->upload_seconds() - uploaded;
  if (!whole) return std::move(whole).error();
  m.whole = *whole;
  if (!m.stats) {
    EPK_ENC_CUDA_TRY("source", m.rms.reserve(std::size_t(m.rows) * 4));
    Impl::HostRows rows_read;
    EPK_TRY(m.row_stats(m.whole, m.rows, m.rms.as<float>(), true, rows_read));
    m.stats = Impl::source_stats_of(std::move(rows_read));
  }
  return *m.stats;
}

void DeviceSteps::prefetch_next(std::span<const std::byte> next) { impl_->source->prefetch_next(next); }

void DeviceSteps::settle() { impl_->source->settle(); }

model::FieldCounts DeviceSteps::sample_counts(float scale) {
  ScopedTimer timer(&times_.sample);
  ++times_.calls_sample;
  Impl& m = *impl_;
  if (!sticky_) return {};
  auto c = m.fields->quantize_counts(m.sample, m.sample_source(), scale);
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
  rate::SampleCoded out;
  EPK_TRY_ASSIGN(out.counts, m.fields->quantize_counts(m.sample, m.sample_source(), scale));
  rans::EncodeGeometry g{std::uint32_t(m.sample_rows), cols, std::uint32_t(prob_bits), tile_symbols, DType::kF32};
  EPK_TRY_ASSIGN(out.coded, m.coder->code(m.sample, out.counts, std::vector<float>(m.sample_rows, 1.0f), g,
                                          &times_.download));
  return out;
}

Status DeviceSteps::quantize(float scale) {
  ScopedTimer timer(&times_.quantize);
  ++times_.calls_quantize;
  EPK_TRY(sticky_);
  EPK_TRY(impl_->need_whole());
  return impl_->fields->quantize(impl_->tensor, impl_->tensor_source(), scale);
}

model::FieldCounts DeviceSteps::counts() {
  ScopedTimer timer(&times_.counts);
  if (!sticky_) return {};
  auto c = impl_->fields->counts(impl_->tensor);
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
  EPK_TRY(m.need_whole());
  EPK_ENC_CUDA_TRY("refit", m.sums.reserve(std::size_t(m.rows) * 24));
  enc::launch_refit_sums(m.whole, m.dtype, m.rows, m.cols, m.vpr, m.tensor.coset.as<std::uint8_t>(),
                         m.tensor.fields.as<std::int32_t>(), m.sums.as<double>(), m.stream);
  EPK_ENC_CUDA_TRY("refit", cudaGetLastError());
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
      scales[r] = float(scale) * m.stats->rms[r];
      if (row_sse) (*row_sse)[r] = energy;
    }
  }
  return {};
}

Result<rans::EncodedTensor> DeviceSteps::code(std::vector<float> scales, const rans::EncodeGeometry& g) {
  Impl& m = *impl_;
  EPK_TRY(sticky_);
  EPK_TRY(m.need_whole());
  last_error_.reset();
  if (g.rows != m.rows || g.cols != m.cols) {
    return make_error(ErrorCode::kInvalidArgument, "device encoder: geometry " + std::to_string(g.rows) + "x" +
                                                       std::to_string(g.cols) + " for a loaded " +
                                                       std::to_string(m.rows) + "x" + std::to_string(m.cols));
  }
  rans::EncodedTensor out;
  {
    ScopedTimer timer(&times_.code);
    EPK_TRY_ASSIGN(model::FieldCounts c, m.fields->counts(m.tensor));
    EPK_TRY_ASSIGN(out, m.coder->code(m.tensor, c, std::move(scales), g, &times_.download));
  }
  ScopedTimer timer(&times_.error);
  // The reconstruction against the source (rate::ReconstructionError), from the fields just coded.
  EPK_ENC_CUDA_TRY("error", m.scales.reserve(std::size_t(m.rows) * 4));
  EPK_ENC_CUDA_TRY("error", m.err.reserve(std::size_t(m.rows) * 16));
  EPK_ENC_CUDA_TRY("error", m.nonzero.reserve(std::size_t(m.rows) * 2));
  EPK_TRY(m.rows_to_device(m.scales.as<void>(), out.scales.data(), std::size_t(m.rows) * 4));
  enc::launch_error_sums(m.whole, m.dtype, m.rows, m.cols, m.vpr, m.tensor.coset.as<std::uint8_t>(),
                         m.tensor.fields.as<std::int32_t>(), m.scales.as<float>(), m.err.as<double>(),
                         m.nonzero.as<std::uint8_t>(), m.stream);
  EPK_ENC_CUDA_TRY("error", cudaGetLastError());
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
