// The device encoder's source: a tensor's bytes on the device, and the rows of its scale search (the sample) in one
// compact block ahead of them. load() puts the sample's rows on the device first (gathered on the host into the
// staged copier's slots) and copies the whole tensor on a second stream from a helper thread, so that the sample's
// steps (the scale search: about 15 quantise-and-count round trips) run while the tensor is still arriving; whole()
// waits for it. The upload is bound by the host's memory bandwidth (the staging copy and the DMA share it:
// docs/measurements/gpu-encoder.md), so it is the step worth hiding.
// The next tensor's bytes (prefetch_next) are copied the same way while the current one is encoded; a tensor
// found there has its sample gathered on the device.
// Host-only; one encoding thread at a time (the helper thread is the object's own).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <thread>
#include <vector>

#include "codec/common/result.h"
#include "codec/cuda/encode/encode_copy.h"
#include "codec/cuda/encode/encode_device.h"

namespace epk::cuda {

class EncoderSource {
 public:
  // stream: the encoder's (the sample's copy and gather are ordered on it); copier: the owner's, used by the
  // encoding thread only. Errors (kCuda): the copy stream cannot be created.
  static Result<std::unique_ptr<EncoderSource>> create(int device, cudaStream_t stream, StagedCopier& copier);
  EncoderSource(const EncoderSource&) = delete;
  EncoderSource& operator=(const EncoderSource&) = delete;
  ~EncoderSource();

  // Takes weights (rows of row_bytes each) and the sample's rows (rate::sample_rows' choice; every row in order
  // means the sample is the whole tensor, which is then on the device when load returns). The sample is ready on
  // the stream when load returns; weights must stay valid until whole() or settle() returns.
  Status load(std::span<const std::byte> weights, std::size_t row_bytes, const std::vector<std::uint32_t>& sample);
  // The sample's rows, row i the source's row sample[i] (the whole tensor's bytes when the sample is every row).
  const void* sample() const { return sample_is_whole_ ? whole_ptr() : sample_.as<void>(); }
  bool sample_is_whole() const { return sample_is_whole_; }
  // Waits for the whole tensor. The next tensor's bytes (prefetch_next) are copied on the helper thread from when
  // this one's are all on the device (in load() for a tensor found copied ahead, else here).
  Result<const void*> whole();
  // Waits for any copy still reading the loaded tensor's bytes, so that their owner may free them.
  void settle();
  // The bytes of the tensor to be encoded after the one loaded next (empty: none); they must stay valid and
  // unchanged until the load() of exactly these bytes (same address and size), or a later prefetch_next.
  void prefetch_next(std::span<const std::byte> next) { next_ = next; }
  // Wall seconds the encoding thread spent copying or waiting for source bytes (for benches).
  double upload_seconds() const { return upload_seconds_; }

 private:
  EncoderSource(int device, cudaStream_t stream, StagedCopier& copier)
      : device_(device), stream_(stream), copier_(copier) {}
  const void* whole_ptr() const { return buffers_[active_].as<void>(); }
  // A copy of `bytes` into the spare buffer, on copy_stream_ from the helper thread.
  void start_copy(std::span<const std::byte> bytes);
  // True (and the spare buffer made current) when the helper thread copied exactly `bytes`; a copy of other bytes
  // is left running (it writes the spare buffer only).
  bool take_copy(std::span<const std::byte> bytes);
  Status gather_on_device(std::size_t row_bytes, const std::vector<std::uint32_t>& sample);
  void start_next();

  int device_;
  cudaStream_t stream_;
  StagedCopier& copier_;
  cudaStream_t copy_stream_ = nullptr;
  // The tensor's bytes: the current one's and the spare the helper thread fills.
  DeviceBuffer buffers_[2];
  int active_ = 0;
  DeviceBuffer sample_, sample_rows_;
  PinnedBuffer pin_rows_;
  std::thread helper_;
  std::span<const std::byte> copying_;  // what the helper thread copies (or copied, until taken)
  cudaError_t copy_error_ = cudaSuccess;
  // The helper's copies leave a core to the encoding thread, which runs the sample's steps meanwhile: with every core
  // copying, a search step could wait a scheduler slice for its thread.
  StagedCopier helper_copier_{1};
  std::span<const std::byte> loaded_, next_;
  bool whole_ready_ = false, sample_is_whole_ = false;
  double upload_seconds_ = 0.0;
};

}  // namespace epk::cuda
