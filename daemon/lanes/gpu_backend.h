// epkd's GPU serving path, one per served device: a device pool, one CUDA stream, a ring of interprocess
// "decode-done" events, and the resident compressed tier.
//
// - Resident tier: when a model is added, the serving layer's device tier (codec/serve/device_tier.h) is made for
//   it: every lattice-rans tensor's stored buffers, checksummed (ModelSource::verify_stored), in one shareable region
//   (outside the slot budget) with its bf16 plan's scratch uploaded, and every intq "int" tensor's device form.
//   Plans for other formats and row shards are built on first use and kept. An uncached acquire of a lattice-rans
//   tensor then costs a 16-byte descriptor patch (the slot's address) and one kernel. Where the lane's tier budget
//   (tier_budget_mb) has no room for all of it, what daemon/lanes/tier_placement.h leaves out is in host memory
//   instead (the model's host tier, daemon/lanes/host_tiers.h; intq forms in pinned memory) and each acquire of it
//   first copies the tensor's compressed bytes to the device.
// - produce() runs on the GPU scheduler's single thread (a DecodeScheduler with one worker: acquire outranks
//   prefetch, promote as on the CPU path). The device tier writes the slot where a device path covers the request;
//   everything else (raw tensors, shards of intq tensors, layouts no kernel writes) is produced by the tensor's host
//   producer (ModelSource::produce) into a pinned host buffer and copied to the slot on the stream. Either way the
//   ring event slot_id % ring is recorded after the work, then `on_enqueued` runs
//   (epkd answers the acquire there, with a decode status ticket: docs/PROTOCOL.md), and produce() waits for the
//   stream before returning: its result is the tile status, which epkd publishes in the status table before the slot
//   is marked ready (shm/decode_status.h).
// - Release fences (kCudaEvent), per slot: client_fence() opens the client's event once per (client, event handle)
//   together with a daemon side stream for it, makes that side stream wait on the event (cuStreamWaitEvent snapshots
//   the client's latest record), records a daemon marker event from a bounded pool (daemon/cache/fence_pool.h) after the
//   wait and returns a Fence that completes with the marker. The cache holds only the released slot until it does;
//   the decode stream never waits on a client, so a client whose kernels run long (or hang) holds its own slots and
//   nothing else. A client event already complete when the release is read needs none of this: the query reads the
//   same snapshot the wait would take, and the release completes at once. One side stream per client event: a hung
//   client cannot delay another client's fences. A client that goes (drop_client): its event and side stream are
//   destroyed (CUDA finishes the queued wait and marker first), its fences stay on their slots until their markers
//   complete.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "codec/common/result.h"
#include "daemon/cache/cache.h"
#include "daemon/sources/model_source.h"
#include "shm/fence.h"
#include "shm/pool.h"
#include "shm/protocol.h"

namespace epk::daemon {

class GpuBackend {
 public:
  virtual ~GpuBackend() = default;

  virtual int device() const = 0;
  // The decode-done ring, sent once in the hello reply.
  virtual const std::vector<shm::IpcEventHandle>& event_handles() const = 0;
  // The ring index recorded after slot `slot_id`'s decode. Waiting on a later recording of the same event is
  // conservative and correct: all work goes to one in-order stream, so a later recording completes after this one.
  std::uint32_t event_for(std::uint64_t slot_id) const {
    return static_cast<std::uint32_t>(slot_id % event_handles().size());
  }

  // Makes `src`'s compressed tier servable on the GPU (model `model_id`): its lattice-rans tensors' stored buffers and
  // its intq "int" tensors' device forms, on the device where this lane's tier budget (tier_budget_mb) has room for
  // them all; else those daemon/lanes/tier_placement.h picks within it stay on the device and the others in host
  // memory: lattice-rans tensors in the model's host tier (daemon/lanes/host_tiers.h), intq forms in pinned memory
  // made at their first decode; each decode of one copies its compressed bytes to the device first.
  // Returns the bytes each side holds.
  struct TierAdded {
    std::uint64_t tier_bytes = 0;      // the whole tier (region and intq forms' stored bytes)
    std::uint64_t tier_on_device = 0;  // what of it is kept on the device
    std::uint64_t host_bytes = 0;      // the host tier's size (0: none; every lattice-rans tensor is on the device)
    std::uint64_t device_bytes = 0;    // all device memory added (the region, plans, intq forms)
  };
  virtual Result<TierAdded> add_model(std::uint32_t model_id, std::shared_ptr<const ModelSource> src) = 0;
  // A model retired at a reload whose last slot has gone: its tier, plans and intq forms are freed (on the calling
  // thread, which must not be the GPU scheduler's; no decode of the model may be in flight). A tier a client imported
  // through open_stored stays mapped in that client until it unmaps it (CUDA VMM keeps the memory while any handle
  // lives). Returns the resident bytes freed.
  virtual std::uint64_t remove_model(std::uint32_t model_id) = 0;
  virtual std::uint64_t resident_bytes() const = 0;
  // Where model `model_id`'s tier is on this lane: its bytes kept on the device (the region and the intq forms placed
  // there, as the budget counts them), its host tier (one per model, shared by the lanes) and this lane's own intq
  // forms in host memory, made so far; all 0: none here.
  struct ModelTier {
    std::uint64_t device = 0, host = 0, lane_host = 0;
  };
  virtual ModelTier model_tier(std::uint32_t model_id) const = 0;
  // Host memory this lane decodes from (host tiers and intq forms made there), and the bytes its decodes copied from
  // it to the device so far.
  virtual std::uint64_t host_tier_bytes() const = 0;
  virtual std::uint64_t staged_bytes() const = 0;
  // The model's compressed tier on this device, for clients that decode in their own context: the region's fd (owned
  // by the backend, valid while it lives) and size, a device pool or (host) the host tier's sealed memfd. nullopt
  // when the model has no lattice-rans tensor here. The region holds every lattice-rans tensor's stored buffers at
  // codec/cuda/decode/tier_layout.h's places, checksummed.
  struct TierExport {
    int fd = -1;
    std::uint64_t bytes = 0;
    bool host = false;
  };
  virtual std::optional<TierExport> tier(std::uint32_t model_id) const = 0;
  // True when the model's tier here is a host tier still being filled (the cold start, daemon/lanes/host_tiers.h):
  // tier() has nothing for clients yet, and `then` runs once it has (on the thread that completes it). False, with
  // `then` dropped, when tier() answers now.
  virtual bool when_tier_ready(std::uint32_t model_id, std::function<void()> then) = 0;

  // Fills [slot_offset, slot_offset + bytes) of the device pool with `tensor` of `model_id` in `layout` and records
  // event_for(slot_id). Called from one thread (the GPU scheduler's). `*on_device` says whether the kernel ran.
  // `on_enqueued` (may be empty) runs once all the work is on the stream and before produce() waits for it; it is
  // not called when issuing failed. The result covers the whole decode (a corrupt tile is kCorruptTile).
  // `shard` (resolved, shm/shard.h; whole for the whole tensor): a row shard of a lattice-rans tensor in a dense or
  // rowwise layout decodes only the tiles covering its rows, with a plan for that row range (built on its first use
  // and kept, its scratch counted in resident_bytes); a column shard decodes the whole tensor into a device scratch
  // (kept, grown to the largest, counted in resident_bytes) and copies its columns; shards of raw and intq tensors
  // are produced by the CPU path's produce_shard into the staging buffer and copied.
  virtual Status produce(std::uint32_t model_id, const ModelSource& src, std::size_t tensor, shm::Layout layout,
                         const shm::ShardRange& shard, std::uint64_t slot_offset, std::uint64_t bytes,
                         std::uint64_t slot_id, bool* on_device, const std::function<void()>& on_enqueued) = 0;
  // When the last produce() had issued all its work and began waiting for the stream (steady_clock, ns since its
  // epoch; 0 if unknown). Read on the produce() thread, for the debug timeline of an uncached acquire.
  virtual std::int64_t last_enqueued_ns() const { return 0; }

  // kCudaEvent release: the fence that completes once the client's work before its latest record of `event` has
  // (see above). Thread-safe, and called without the service lock (it may open the event: cuIpcOpenEventHandle).
  // kNoSpace when the marker pool is exhausted by fences not yet complete.
  virtual Result<std::unique_ptr<shm::Fence>> client_fence(ClientId client, const shm::IpcEventHandle& event) = 0;
  virtual void drop_client(ClientId client) = 0;
  // Release fences handed out whose work is not yet complete (queried now; the shutdown log).
  virtual std::size_t pending_fences() = 0;
};

struct GpuSetup {
  std::unique_ptr<shm::Pool> pool;  // a shm::DevicePool of the budget's size
  std::unique_ptr<GpuBackend> backend;
};

// How many CUDA devices this build can serve (0 without CUDA or a driver).
int gpu_device_count();
// Whether this build has the GPU path and device `device` is usable (the driver loads, the device exists).
bool gpu_device_present(int device);
class HostTiers;
// The host tiers every device lane of this process shares (daemon/lanes/host_tiers.h), made and checked on `threads`
// threads; null in builds without CUDA.
std::shared_ptr<HostTiers> make_host_tiers(int threads);
// The device pool (budget bytes) and the backend over it, with `tier_budget` bytes of the device for models' tiers
// (kNoTierBudget in daemon/config/config.h: no limit) and `host_tiers` for the others (shared by every lane of the
// process); kUnsupported in builds without CUDA.
Result<GpuSetup> make_gpu_setup(int device, std::uint64_t budget_bytes, std::uint32_t ring_events,
                                std::uint64_t tier_budget, std::shared_ptr<HostTiers> host_tiers);

}  // namespace epk::daemon
