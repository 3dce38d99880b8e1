// Per-slot release fences for device lanes (docs/PROTOCOL.md, release): a bounded pool of daemon-owned
// completion markers (CUDA events on a device lane). At a kCudaEvent release the backend makes a daemon side stream
// wait on the client's event, takes a marker from this pool, records it on that side stream and hands the cache the
// marker's Fence: the released slot alone waits for the client, never the lane's decode stream.
//
// Why a daemon-owned marker and not the client's event itself: cuStreamWaitEvent snapshots the client's latest record
// when it is called, but the client may re-record its event afterwards (for a later release), so querying the client's
// event later could answer for the wrong work. The marker recorded after the wait answers for exactly this release.
//
// Markers are reused: a Fence gives its marker back when destroyed, and when every marker is held the pool reclaims
// one whose work has completed (the cache drops completed fences only when it looks at a slot); a Fence whose marker
// was reclaimed reads complete, since only a completed marker is reclaimed. When `capacity` markers are all held by work not yet complete, take() answers
// kNoSpace (the release is refused with a clear message; the client may retry). A marker whose query fails (a sticky
// context error) never reads complete: a slot is never reused on an error.
//
// The device side is a MarkerSource (CUDA events in daemon/lanes/gpu_backend.cc; a fake in tests), so the bookkeeping is
// tested without a GPU. Thread-safe: take() runs on io threads, Fence::completed() under a lane's lock (lock order:
// the lane lock, then this pool's; the pool calls nothing that locks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "codec/common/result.h"
#include "shm/fence.h"

namespace epk::daemon {

enum class MarkerState : std::uint8_t { kPending, kDone, kFailed };

class MarkerSource {
 public:
  virtual ~MarkerSource() = default;
  // Makes marker `index` (called once per index, in order 0, 1, ...).
  virtual Status make(std::size_t index) = 0;
  // Non-blocking. kFailed: the query itself failed (the error is logged by the pool once per marker use).
  virtual MarkerState query(std::size_t index) = 0;
  // A description of the last kFailed, for the log.
  virtual std::string last_error() const { return {}; }
};

class FencePool : public std::enable_shared_from_this<FencePool> {
 public:
  // `what` names the pool in errors and logs ("CUDA device 0").
  static std::shared_ptr<FencePool> create(std::unique_ptr<MarkerSource> source, std::size_t capacity,
                                           std::string what);

  // A marker held by one release. The owner records the marker (index()) on its stream, calls arm(), then hands the
  // Fence to the cache. Destroying the Fence gives the index back.
  class Fence;
  // A free marker (made on first use); kNoSpace when all `capacity` are held by work not yet known complete.
  Result<std::unique_ptr<Fence>> take();

  // Markers held by fences whose work is not known complete (queried now), for the shutdown log.
  std::size_t pending();
  std::size_t capacity() const { return capacity_; }
  std::size_t made() const;  // markers created so far (<= capacity)

 private:
  FencePool(std::unique_ptr<MarkerSource> source, std::size_t capacity, std::string what)
      : source_(std::move(source)), capacity_(capacity), what_(std::move(what)) {}

  struct Entry {
    std::uint64_t generation = 0;  // bumped each time the index is given back or reclaimed
    bool held = false;
    bool armed = false;  // recorded: only then may a query of it stand for the fence (a fresh event reads complete)
    bool failure_logged = false;
  };
  bool completed(std::size_t index, std::uint64_t generation);
  void arm(std::size_t index, std::uint64_t generation);
  void give_back(std::size_t index, std::uint64_t generation);
  MarkerState query_locked(std::size_t index);

  std::unique_ptr<MarkerSource> source_;
  const std::size_t capacity_;
  const std::string what_;
  mutable std::mutex mu_;
  std::vector<Entry> entries_;
  std::vector<std::size_t> free_;
};

class FencePool::Fence final : public shm::Fence {
 public:
  Fence(std::shared_ptr<FencePool> pool, std::size_t index, std::uint64_t generation)
      : pool_(std::move(pool)), index_(index), generation_(generation) {}
  ~Fence() override { pool_->give_back(index_, generation_); }
  Fence(const Fence&) = delete;
  Fence& operator=(const Fence&) = delete;

  std::size_t index() const { return index_; }
  // The marker has been recorded after the client's work: from now on its query answers for this fence.
  void arm() { pool_->arm(index_, generation_); }
  // True once the marker's recorded work has completed; false while pending, before arm() and on a failed query.
  bool completed() const override { return pool_->completed(index_, generation_); }

 private:
  std::shared_ptr<FencePool> pool_;
  std::size_t index_;
  std::uint64_t generation_;
};

}  // namespace epk::daemon
