#include "codec/cuda/encode/encode_fields.h"

#include <climits>
#include <cstring>

namespace epk::cuda {

namespace {

constexpr std::uint32_t kHistogramAlphabetLimit = 1u << model::kMaxProbBits;  // wider tables always overflow
constexpr std::size_t kOnesAt = sizeof(int) * 2 * enc::kTables;
constexpr std::size_t kRangeBytes = kOnesAt + sizeof(unsigned long long);
// lo[kTables], base[kTables] and the bins in all, as launch_histogram_layout writes them.
constexpr std::size_t kLoBaseBytes = sizeof(int) * (2 * enc::kTables + 1);
// The histogram's most bins (every table but the cosets' as wide as the limit), and the bins the sample search's
// one sync brings back with the ranges (a 4 bpp tensor's tables take about 500-1500).
constexpr std::size_t kHistogramMaxBins = std::size_t(enc::kTables - 1) * kHistogramAlphabetLimit;
constexpr std::size_t kHistogramPrefix = 4096;

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

// model::count_fields' shape for fs: the cosets' table counted from fs.ones, every other table sized by its range
// and its counts still 0.
model::FieldCounts empty_counts(const FieldSet& fs) {
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

void fill_counts(model::FieldCounts& out, const HistogramLayout& layout, const unsigned long long* h) {
  for (int t = 1; t < enc::kTables; ++t) {
    if (layout.base[t] < 0) continue;
    for (std::size_t i = 0; i < out[t].counts.size(); ++i) out[t].counts[i] = h[std::size_t(layout.base[t]) + i];
  }
}

}  // namespace

Status FieldCounter::start_quantize(FieldSet& fs, const QuantizeSource& src, float scale) {
  EPK_ENC_CUDA_TRY("fields", fs.coset.reserve(fs.n));
  EPK_ENC_CUDA_TRY("fields", fs.fields.reserve(fs.n * 32));
  EPK_ENC_CUDA_TRY("ranges", range_.reserve(kRangeBytes));
  EPK_ENC_CUDA_TRY("ranges", pin_range_.reserve(kRangeBytes));
  int* init = pin_range_.as<int>();
  for (int t = 0; t < enc::kTables; ++t) {
    init[2 * t] = INT_MAX;
    init[2 * t + 1] = INT_MIN;
  }
  *reinterpret_cast<unsigned long long*>(pin_range_.as<std::byte>() + kOnesAt) = 0;
  EPK_ENC_CUDA_TRY("ranges", cudaMemcpyAsync(range_.as<void>(), init, kRangeBytes, cudaMemcpyHostToDevice, stream_));
  enc::launch_quantize(src.data, src.dtype, src.cols, src.vpr, src.rms, fs.n, scale, fs.coset.as<std::uint8_t>(),
                       fs.fields.as<std::int32_t>(), range_.as<int>(),
                       reinterpret_cast<unsigned long long*>(range_.as<std::byte>() + kOnesAt), stream_);
  EPK_ENC_CUDA_TRY("quantize", cudaGetLastError());
  return {};
}

void FieldCounter::take_ranges(FieldSet& fs) const {
  std::memcpy(fs.range, pin_range_.as<int>(), sizeof fs.range);
  std::memcpy(&fs.ones, pin_range_.as<std::byte>() + kOnesAt, sizeof fs.ones);
}

Status FieldCounter::quantize(FieldSet& fs, const QuantizeSource& src, float scale) {
  EPK_TRY(start_quantize(fs, src, scale));
  EPK_ENC_CUDA_TRY("ranges", cudaMemcpyAsync(pin_range_.as<void>(), range_.as<void>(), kRangeBytes,
                                             cudaMemcpyDeviceToHost, stream_));
  EPK_ENC_CUDA_TRY("quantize", cudaStreamSynchronize(stream_));
  take_ranges(fs);
  return {};
}

Result<model::FieldCounts> FieldCounter::counts(const FieldSet& fs) {
  if (fs.n == 0) return model::FieldCounts{};
  model::FieldCounts out = empty_counts(fs);
  const HistogramLayout layout = layout_of(fs.range);
  if (layout.bins == 0) return out;
  const std::uint32_t bins = layout.bins;
  EPK_ENC_CUDA_TRY("histogram", lo_base_.reserve(kLoBaseBytes));
  EPK_ENC_CUDA_TRY("histogram", pin_lo_base_.reserve(kLoBaseBytes));
  EPK_ENC_CUDA_TRY("histogram", hist_.reserve(std::size_t(bins) * 8));
  EPK_ENC_CUDA_TRY("histogram", pin_hist_.reserve(std::size_t(bins) * 8));
  std::memcpy(pin_lo_base_.as<int>(), layout.lo, sizeof layout.lo);
  std::memcpy(pin_lo_base_.as<int>() + enc::kTables, layout.base, sizeof layout.base);
  EPK_ENC_CUDA_TRY("histogram", cudaMemcpyAsync(lo_base_.as<void>(), pin_lo_base_.as<void>(), 2 * sizeof layout.lo,
                                                cudaMemcpyHostToDevice, stream_));
  EPK_ENC_CUDA_TRY("histogram", cudaMemsetAsync(hist_.as<void>(), 0, std::size_t(bins) * 8, stream_));
  enc::launch_histogram(fs.coset.as<std::uint8_t>(), fs.fields.as<std::int32_t>(), fs.n, lo_base_.as<int>(),
                        lo_base_.as<int>() + enc::kTables, bins, hist_.as<unsigned long long>(), stream_);
  EPK_ENC_CUDA_TRY("histogram", cudaGetLastError());
  EPK_ENC_CUDA_TRY("histogram", cudaMemcpyAsync(pin_hist_.as<void>(), hist_.as<void>(), std::size_t(bins) * 8,
                                                cudaMemcpyDeviceToHost, stream_));
  EPK_ENC_CUDA_TRY("histogram", cudaStreamSynchronize(stream_));
  fill_counts(out, layout, pin_hist_.as<unsigned long long>());
  return out;
}

Result<model::FieldCounts> FieldCounter::quantize_counts(FieldSet& fs, const QuantizeSource& src, float scale) {
  if (fs.n == 0) {
    EPK_TRY(quantize(fs, src, scale));
    return counts(fs);
  }
  EPK_TRY(start_quantize(fs, src, scale));
  EPK_ENC_CUDA_TRY("histogram", lo_base_.reserve(kLoBaseBytes));
  EPK_ENC_CUDA_TRY("histogram", pin_lo_base_.reserve(kLoBaseBytes));
  EPK_ENC_CUDA_TRY("histogram", hist_.reserve(kHistogramMaxBins * 8));
  if (!hist_cleared_) {
    // The prefix read back below holds bins past this step's layout too (never read): zeroed once, so that every
    // byte copied is one written.
    EPK_ENC_CUDA_TRY("histogram", cudaMemsetAsync(hist_.as<void>(), 0, kHistogramMaxBins * 8, stream_));
    hist_cleared_ = true;
  }
  EPK_ENC_CUDA_TRY("histogram", pin_hist_.reserve(kHistogramPrefix * 8));
  enc::launch_histogram_layout(range_.as<int>(), kHistogramAlphabetLimit, lo_base_.as<int>(),
                               hist_.as<unsigned long long>(), stream_);
  enc::launch_histogram_laid_out(fs.coset.as<std::uint8_t>(), fs.fields.as<std::int32_t>(), fs.n,
                                 lo_base_.as<int>(), hist_.as<unsigned long long>(), stream_);
  EPK_ENC_CUDA_TRY("histogram", cudaGetLastError());
  EPK_ENC_CUDA_TRY("ranges", cudaMemcpyAsync(pin_range_.as<void>(), range_.as<void>(), kRangeBytes,
                                             cudaMemcpyDeviceToHost, stream_));
  EPK_ENC_CUDA_TRY("histogram", cudaMemcpyAsync(pin_lo_base_.as<void>(), lo_base_.as<void>(), kLoBaseBytes,
                                                cudaMemcpyDeviceToHost, stream_));
  EPK_ENC_CUDA_TRY("histogram", cudaMemcpyAsync(pin_hist_.as<void>(), hist_.as<void>(), kHistogramPrefix * 8,
                                                cudaMemcpyDeviceToHost, stream_));
  EPK_ENC_CUDA_TRY("histogram", cudaStreamSynchronize(stream_));
  take_ranges(fs);
  const HistogramLayout layout = layout_of(fs.range);
  const int* on_device = pin_lo_base_.as<int>();
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
    EPK_ENC_CUDA_TRY("histogram", pin_hist_.reserve(std::size_t(layout.bins) * 8));
    EPK_ENC_CUDA_TRY("histogram", cudaMemcpyAsync(pin_hist_.as<void>(), hist_.as<void>(),
                                                  std::size_t(layout.bins) * 8, cudaMemcpyDeviceToHost, stream_));
    EPK_ENC_CUDA_TRY("histogram", cudaStreamSynchronize(stream_));
  }
  fill_counts(out, layout, pin_hist_.as<unsigned long long>());
  return out;
}

}  // namespace epk::cuda
