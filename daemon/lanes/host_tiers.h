// Models' host tiers for epkd's device lanes (shm/host_tier.h): a lane whose tier budget (tier_budget_mb) leaves no
// room for a model's compressed tier keeps it in host memory and decodes from it on the GPU, each decode first
// copying its tensor's compressed bytes to the device (serve::DeviceTier::bind_host). One host tier per model, shared
// by every lane that keeps the model there and by every client that decodes it itself (open_stored passes its fd),
// made by the first lane that needs it, freed once no lane holds it (clients keep their own maps). CUDA builds only.
//
// The cold start: a tier serves from the moment it is made. Its tensors are checksummed and copied in the background
// in tensor (forward) order by the HostTiers' fill threads (the file's pages read by as many; shared by every tier,
// the oldest first, so opening many models never runs more); a decode that needs a tensor not yet in place fills it
// on its own thread, or waits for the filler that has it (HostTier::ready), so an acquire waits for its own tensor
// only and never decodes on the CPU. Once every tensor is in, the memfd is sealed, then page-locked
// with the driver (portable: every device's context copies from it at full speed; until then copies run from pageable
// memory): sealing must come first, since a memfd whose pages are pinned refuses F_SEAL_WRITE. Clients get the fd only
// once it is sealed (when_complete).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "codec/common/result.h"
#include "codec/serve/device_tier.h"
#include "daemon/sources/model_source.h"
#include "shm/cuda_event.h"
#include "shm/host_tier.h"

namespace epk::daemon {

class HostTier {
 public:
  // A tier to fill into `memory` (a fresh memfd of the placement's region_bytes()) with `parts` (DeviceTier::host_parts
  // of the model's placement) from `src`, each tensor checked by verify_stored first: by fill_next() (HostTiers' fill
  // threads) and by ready().
  HostTier(std::uint32_t model_id, shm::HostTierMemory memory, std::vector<serve::DeviceTier::HostPart> parts,
           std::shared_ptr<const ModelSource> src, int device);
  ~HostTier();  // waits for the seal if it was started
  HostTier(const HostTier&) = delete;
  HostTier& operator=(const HostTier&) = delete;

  // The whole region, read-only: valid from the start (a tensor's bytes once ready() said so).
  std::span<const std::byte> bytes() const { return memory_.bytes(); }
  std::uint64_t size() const { return memory_.size(); }
  int fd() const { return memory_.fd(); }

  // Blocks until `tensor`'s stored buffers are in place and checked: fills them on this thread when no filler has
  // taken them yet, else waits for the one that has. The tensor's checksum error (kChecksum naming it) if it was
  // refused; its bytes are then never read. A tensor the tier does not hold: ok at once.
  Status ready(std::size_t tensor);
  // Every tensor in and the memfd sealed (then registered, or refused by the driver and said so in the log).
  bool complete() const;
  // After complete(): the first tensor refused (tensor order), or ok. A tier with a refused tensor is not passed to
  // clients (they would read its zeros).
  Status outcome() const;
  // Runs `then` once complete(): here and now if it is, else on the thread that completes it; also when the tier is
  // destroyed before it completed.
  void when_complete(std::function<void()> then);
  // Fills the next part no one has taken, in tensor order, on this thread: false when none is left.
  bool fill_next();

 private:
  enum : std::uint8_t { kPending, kFilling, kDone };
  Status fill(std::size_t part);
  void finish();
  Status outcome_now() const;  // every part done

  const std::uint32_t model_id_;
  const int device_;
  const std::shared_ptr<const ModelSource> src_;  // the parts' uploads read its bytes
  const std::vector<serve::DeviceTier::HostPart> parts_;
  std::vector<std::int64_t> part_of_;  // tensor -> part, -1 where the tier does not hold it
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();

  shm::HostTierMemory memory_;                       // sealed by finish()
  shm::HostRegistration registration_;               // after the seal; empty where the driver refused
  std::unique_ptr<std::atomic<std::uint8_t>[]> state_;  // per part
  std::vector<Status> results_;                      // per part, written before its state turns kDone
  std::atomic<std::size_t> next_{0};                 // the next part fill_next() looks at
  mutable std::mutex mu_;
  std::condition_variable filled_;
  std::size_t done_ = 0;                             // under mu_
  bool complete_ = false;                            // under mu_
  std::vector<std::function<void()>> then_;          // under mu_
  std::atomic<bool> abandoned_{false};               // the destructor has begun
  std::thread finisher_;                             // runs finish(); started by whoever completes the last part
};

class HostTiers {
 public:
  // `threads` (at least 1) fill threads, started with the first tier and shared by all.
  explicit HostTiers(int threads) : threads_(threads < 1 ? 1 : threads) {}
  ~HostTiers();  // stops the fill threads between tensors
  HostTiers(const HostTiers&) = delete;
  HostTiers& operator=(const HostTiers&) = delete;

  // Model `model_id`'s host tier, laid out as `placement` (a DeviceTier of the model's producers) and filled from
  // `src` in the background; registered on `device` once complete. The one made before if it still lives.
  Result<std::shared_ptr<HostTier>> get(std::uint32_t model_id, const serve::DeviceTier& placement,
                                              std::shared_ptr<const ModelSource> src, int device);

 private:
  void fill_loop();

  const int threads_;
  std::mutex mu_;  // two lanes adding one model make it once
  std::condition_variable work_;
  std::unordered_map<std::uint32_t, std::weak_ptr<HostTier>> tiers_;
  std::deque<std::weak_ptr<HostTier>> filling_;  // under mu_: tiers with parts left, the oldest first
  bool stop_ = false;                            // under mu_
  std::vector<std::thread> fillers_;             // last: joined before the members above go
};

}  // namespace epk::daemon
