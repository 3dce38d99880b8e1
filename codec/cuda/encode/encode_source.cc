#include "codec/cuda/encode/encode_source.h"

#include <cstring>

#include "codec/cuda/encode/encode_kernels.h"

namespace epk::cuda {

namespace {

bool same_bytes(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.data() == b.data() && a.size() == b.size();
}

// True when sample lists every one of `rows` rows in order (rate::sample_rows' choice when it takes them all).
bool every_row(const std::vector<std::uint32_t>& sample, std::size_t rows) {
  if (sample.size() != rows) return false;
  for (std::size_t i = 0; i < rows; ++i) {
    if (sample[i] != i) return false;
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<EncoderSource>> EncoderSource::create(int device, cudaStream_t stream, StagedCopier& copier) {
  std::unique_ptr<EncoderSource> s(new EncoderSource(device, stream, copier));
  EPK_ENC_CUDA_TRY("stream", cudaStreamCreateWithFlags(&s->copy_stream_, cudaStreamNonBlocking));
  return s;
}

EncoderSource::~EncoderSource() {
  if (helper_.joinable()) helper_.join();
  if (copy_stream_) cudaStreamDestroy(copy_stream_);
}

void EncoderSource::start_copy(std::span<const std::byte> bytes) {
  if (helper_.joinable()) helper_.join();  // a copy never taken: dropped
  copying_ = bytes;
  copy_error_ = cudaSuccess;
  DeviceBuffer& spare = buffers_[active_ ^ 1];
  helper_ = std::thread([this, &spare, bytes] {
    cudaError_t e = cudaSetDevice(device_);
    if (e == cudaSuccess) e = spare.reserve(bytes.size());
    if (e == cudaSuccess) e = helper_copier_.to_device(spare.as<void>(), bytes.data(), bytes.size(), copy_stream_);
    copy_error_ = e;
  });
}

bool EncoderSource::take_copy(std::span<const std::byte> bytes) {
  if (copying_.empty() || !same_bytes(copying_, bytes)) return false;
  if (helper_.joinable()) helper_.join();
  const bool ok = copy_error_ == cudaSuccess;
  copying_ = {};
  if (ok) active_ ^= 1;
  return ok;
}

Status EncoderSource::load(std::span<const std::byte> weights, std::size_t row_bytes,
                           const std::vector<std::uint32_t>& sample) {
  ScopedTimer timer(&upload_seconds_);
  loaded_ = weights;
  whole_ready_ = take_copy(weights);
  sample_is_whole_ = row_bytes && every_row(sample, weights.size() / row_bytes);
  if (sample_is_whole_ && !whole_ready_) {
    EPK_ENC_CUDA_TRY("source", buffers_[active_].reserve(weights.size()));
    EPK_ENC_CUDA_TRY("source", copier_.to_device(buffers_[active_].as<void>(), weights.data(), weights.size(),
                                                 stream_));
    whole_ready_ = true;
  }
  if (whole_ready_) {
    start_next();  // the helper is free: the next tensor's copy overlaps all of this one's steps
    return sample_is_whole_ ? Status{} : gather_on_device(row_bytes, sample);
  }
  EPK_ENC_CUDA_TRY("sample", sample_.reserve(sample.size() * row_bytes));
  EPK_ENC_CUDA_TRY("sample", copier_.rows_to_device(sample_.as<void>(), weights.data(), row_bytes, sample, stream_));
  start_copy(weights);
  return {};
}

Status EncoderSource::gather_on_device(std::size_t row_bytes, const std::vector<std::uint32_t>& sample) {
  EPK_ENC_CUDA_TRY("sample", sample_.reserve(sample.size() * row_bytes));
  EPK_ENC_CUDA_TRY("sample", sample_rows_.reserve(sample.size() * 4));
  EPK_ENC_CUDA_TRY("sample", pin_rows_.reserve(sample.size() * 4));
  std::memcpy(pin_rows_.as<void>(), sample.data(), sample.size() * 4);
  EPK_ENC_CUDA_TRY("sample", cudaMemcpyAsync(sample_rows_.as<void>(), pin_rows_.as<void>(), sample.size() * 4,
                                             cudaMemcpyHostToDevice, stream_));
  enc::launch_gather_rows(whole_ptr(), row_bytes, sample_rows_.as<std::uint32_t>(), std::uint32_t(sample.size()),
                          sample_.as<void>(), stream_);
  EPK_ENC_CUDA_TRY("sample", cudaGetLastError());
  // pin_rows_ is reused by the next load: the copy out of it must be done by then.
  EPK_ENC_CUDA_TRY("sample", cudaStreamSynchronize(stream_));
  return {};
}

Result<const void*> EncoderSource::whole() {
  if (!whole_ready_) {
    ScopedTimer timer(&upload_seconds_);
    if (!take_copy(loaded_)) {
      // The helper's copy failed: once more on this thread, whose error is the step's.
      EPK_ENC_CUDA_TRY("source", buffers_[active_].reserve(loaded_.size()));
      EPK_ENC_CUDA_TRY("source", copier_.to_device(buffers_[active_].as<void>(), loaded_.data(), loaded_.size(),
                                                   stream_));
    }
    whole_ready_ = true;
    start_next();
  }
  return whole_ptr();
}

void EncoderSource::start_next() {
  // Not when the next tensor is this one, or already on its way.
  if (!next_.empty() && !same_bytes(next_, loaded_) && !same_bytes(copying_, next_)) start_copy(next_);
}

void EncoderSource::settle() {
  if (helper_.joinable() && same_bytes(copying_, loaded_)) helper_.join();
}

}  // namespace epk::cuda
