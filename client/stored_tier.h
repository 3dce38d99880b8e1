// Client-side decode: this process decodes a model's lattice-rans tensors on its own CUDA streams (in its own context,
// so the decode overlaps its own kernels instead of time-slicing with epkd's context), from the compressed tier epkd
// keeps on the device, into device memory this process owns.
//
//   auto tier = StoredTier::open(client, "llama", 0);       // epkd's tier mapped, the model file's streams read here
//   auto batch = (*tier)->plan(jobs);                        // one plan for many tensors; scratch uploaded once
//   (*batch)->enqueue(stream);                               // one kernel launch, as often as wanted
//   (*batch)->check(stream);                                 // waits; names the first corrupt tile, if any
//
// What epkd shares (open_stored): the model file, read-only, from which the tables and tile offsets are read and
// checksummed here, and the tier: every lattice-rans tensor's stored buffers, checksummed by epkd, at the places
// codec/cuda/decode/tier_layout.h gives. Where epkd's tier budget keeps the model's tier on the device, that is its
// device region; else (tier_budget_mb: a model larger than its share of the GPU) it is epkd's host tier, a sealed
// memfd this process maps read-only and page-locks with the driver: decodes read it in place over PCIe, or a batch
// first copies its tensors' inputs into device memory of the caller's (a staged decode: enqueue_copy, then
// enqueue). The output is bit for bit what epkd writes for the same tensor and layout: both plan through the serving
// layer (codec/serve/device_plan.h: the format, the output's size and rowwise gap, the decode job). The decoded bytes
// are the caller's: epkd's budget, cache and pins cover only what it decodes itself. Built with the CUDA toolkit
// only (stored_tier_none.cc answers kUnsupported elsewhere).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "client/client.h"
#include "codec/common/device_address.h"
#include "codec/common/result.h"
#include "shm/layout.h"

namespace epk::client {

class DecodeBatch {
 public:
  virtual ~DecodeBatch() = default;
  // Launches the decode of every job on `stream` (a CUstream / cudaStream_t; null: the legacy default stream).
  // Stream-ordered: the output is complete when the stream reaches this point. Launch errors only.
  virtual Status enqueue(void* stream) = 0;
  // Waits for `stream`, then kCorruptTile naming the first corrupt tensor and tile of the last decode, if any.
  virtual Status check(void* stream) = 0;
  // Copies the staged jobs' inputs from the host tier to their inputs_at on `stream` (nothing for a batch without
  // staged jobs). Stream-ordered: a decode enqueued after it on the same stream, or on one that waits for it, reads
  // the copy. Contiguous inputs go in one copy.
  virtual Status enqueue_copy(void* stream) = 0;
  virtual std::uint64_t scratch_bytes() const = 0;  // device memory this batch holds (descriptors, tables)
};

class StoredTier {
 public:
  virtual ~StoredTier() = default;
  // Asks epkd for `model`'s tier on `device` (Client::open_stored) and reads the model file's streams. kPermission
  // when epkd does not let this client decode itself; kChecksum when the file no longer matches its index.
  static Result<std::unique_ptr<StoredTier>> open(Client& client, const std::string& model, std::uint32_t device);

  struct Job {
    std::string tensor;
    shm::Layout layout = shm::Layout::kDenseBF16;
    DeviceAddress out_dev;  // 16-byte aligned, decoded_bytes(tensor, layout) long
    // None: the inputs are read from the tier where it is. Else (host tier only) 256-byte aligned device memory
    // where the batch's enqueue_copy puts the tensor's inputs, span(tensor).bytes long.
    DeviceAddress inputs_at;
  };
  // The bytes `tensor` takes in `layout` (rowwise layouts: values, padding, then per-row scales, as shm/layout.h
  // says); kNotFound for an unknown tensor, kUnsupported for a tensor not in the tier or a layout the decoder does
  // not write.
  virtual Result<std::uint64_t> decoded_bytes(std::string_view tensor, shm::Layout layout) const = 0;
  // Whether `tensor` is in the tier (a lattice-rans tensor).
  virtual bool holds(std::string_view tensor) const = 0;
  // Where `tensor`'s inputs sit in the tier region (offset from its start) and how many bytes they take: a staged
  // job's inputs_at holds a copy of those bytes. kNotFound / kUnsupported as decoded_bytes.
  struct Span {
    std::uint64_t offset = 0, bytes = 0;
  };
  virtual Result<Span> span(std::string_view tensor) const = 0;
  // Whether the tier is in host memory (epkd's host tier), rather than epkd's region on the device.
  virtual bool host_tier() const = 0;
  // A host tier: whether it is epkd's memory mapped here (registered with the driver), rather than a pinned copy of
  // this process's (a device that cannot register read-only host memory).
  virtual bool host_tier_shared() const = 0;
  // A tensor's shape as stored (any tensor of the model); kNotFound when absent.
  virtual Result<std::vector<std::uint64_t>> shape(std::string_view tensor) const = 0;
  virtual Result<std::unique_ptr<DecodeBatch>> plan(std::span<const Job> jobs) const = 0;

  // The region's bytes: epkd's device memory or host tier, mapped here (not this process's), or the pinned copy.
  virtual std::uint64_t tier_bytes() const = 0;
  virtual int device() const = 0;
};

}  // namespace epk::client
