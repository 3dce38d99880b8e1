#include "daemon/lanes/gpu_backend.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "codec/serve/device_tier.h"
#include "daemon/cache/fence_pool.h"
#include "daemon/config/config.h"
#include "daemon/lanes/host_tiers.h"
#include "daemon/lanes/tier_placement.h"
#include "shm/cuda_event.h"
#include "shm/device_pool.h"
#include "shm/layout.h"

namespace epk::daemon {
namespace {

// The release fences' markers: plain (non-interprocess, untimed) events on the lane's device, made on first use. The
// array is sized once, so record() on an index the pool handed out never races with make() of a later one.
class CudaMarkers final : public MarkerSource {
 public:
  CudaMarkers(int device, std::size_t capacity)
      : device_(device), events_(std::make_unique<shm::CudaEvent[]>(capacity)) {}
  ~CudaMarkers() override {
    // Destroyed on whichever thread drops the last fence (normally the main one at exit): make the context current.
    (void)shm::make_device_current(device_);
    events_.reset();
  }
  Status make(std::size_t index) override {
    EPK_TRY_ASSIGN(events_[index], shm::CudaEvent::create(device_));
    return {};
  }
  MarkerState query(std::size_t index) override {
    // Queried from io threads (Cache::release, eviction) that may have another device's context current, or none.
    if (Status st = shm::make_device_current(device_); !st) {
      last_error_ = st.error().to_string();
      return MarkerState::kFailed;
    }
    Result<bool> r = events_[index].poll();
    if (!r) {
      last_error_ = r.error().to_string();
      return MarkerState::kFailed;
    }
    return *r ? MarkerState::kDone : MarkerState::kPending;
  }
  std::string last_error() const override { return last_error_; }
  // Called only by the fence's taker between take() and arm(): no query of this index runs meanwhile.
  Status record(std::size_t index, void* stream) const { return events_[index].record(stream); }

 private:
  const int device_;
  std::unique_ptr<shm::CudaEvent[]> events_;
  std::string last_error_;  // under the pool's lock (query runs there)
};

cuda::Stream cs(const shm::CudaStream& s) { return static_cast<cuda::Stream>(s.get()); }

double mean_us(std::uint64_t total_ns, std::uint64_t n) {
  return n == 0 ? 0.0 : static_cast<double>(total_ns) / 1e3 / static_cast<double>(n);
}

class CudaBackend final : public GpuBackend {
 public:
  CudaBackend(int device, DeviceAddress pool_base, shm::CudaStream stream, std::vector<shm::CudaEvent> ring,
              std::vector<shm::IpcEventHandle> handles, std::uint64_t tier_budget,
              std::shared_ptr<HostTiers> host_tiers)
      : device_(device),
        tier_budget_(tier_budget),
        host_tiers_(std::move(host_tiers)),
        pool_base_(pool_base),
        stream_(std::move(stream)),
        ring_(std::move(ring)),
        handles_(std::move(handles)),
        work_(device, [this](std::int64_t delta) { account(std::nullopt, delta); }),
        host_tier_staging_(device, [this](std::int64_t delta) { account(std::nullopt, delta); }) {
    auto markers = std::make_unique<CudaMarkers>(device_, kFenceMarkers);
    markers_ = markers.get();
    fences_ = FencePool::create(std::move(markers), kFenceMarkers, "CUDA device " + std::to_string(device_));
  }

  ~CudaBackend() override {
    if (const std::uint64_t n = fence_calls_.load(), d = fence_done_at_release_.load(); n + d != 0) {
      // Where an event-fence release's time goes in client_fence (the cache's part is logged by the service).
      spdlog::info("device {}: event-fence releases: {} complete on arrival, {} fenced (side-stream wait {:.2f} us, "
                   "marker take+record {:.2f} us mean); {} markers made",
                   device_, d, n, mean_us(fence_wait_ns_.load(), n), mean_us(fence_marker_ns_.load(), n),
                   fences_->made());
    }
    if (host_shard_slots_ != 0) {
      spdlog::info("device {}: {} shard slots by the CPU path (raw and intq shards)", device_,
                   host_shard_slots_.load());
    }
    if (intq_kernel_slots_ + intq_host_slots_ != 0) {
      // Which path intq slots took (epkd_gpu_test reads this line to know the kernels ran).
      spdlog::info("device {}: intq slots: {} by the device kernels, {} by the CPU path", device_,
                   intq_kernel_slots_.load(), intq_host_slots_.load());
    }
    // The members free device memory and events: on this (the main) thread the device's context must be current.
    (void)shm::make_device_current(device_);
    if (stream_.get() != nullptr) (void)stream_.synchronize();  // nothing in flight reads what is freed below
  }

  int device() const override { return device_; }
  const std::vector<shm::IpcEventHandle>& event_handles() const override { return handles_; }
  std::uint64_t resident_bytes() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return resident_bytes_;
  }
  std::uint64_t host_tier_bytes() const override {
    std::lock_guard<std::mutex> lock(mu_);
    std::uint64_t n = 0;
    for (const auto& [id, m] : models_) n += (m.host ? m.host->size() : 0) + m.tier->intq_host_bytes();
    return n;
  }
  std::uint64_t staged_bytes() const override { return staged_bytes_.load(std::memory_order_relaxed); }
  ModelTier model_tier(std::uint32_t model_id) const override {
    std::lock_guard<std::mutex> lock(mu_);
    auto m = models_.find(model_id);
    if (m == models_.end()) return {};
    const Model& made = m->second;
    return {made.tier->device_tier_bytes(), made.host ? made.host->size() : 0, made.tier->intq_host_bytes()};
  }

  Result<TierAdded> add_model(std::uint32_t model_id, std::shared_ptr<const ModelSource> src) override {
    // The model's device tier (codec/serve/device_tier.h): lattice-rans tensors' stored buffers in one region, placed
    // by the rule libepk's client-side decode reads them by, and intq tensors' device forms. The region is a
    // shareable device pool where the tier budget has room for it; else the model's host tier, with what the budget
    // leaves in a device region of the tensors placed there.
    std::vector<const serve::Producer*> producers(src->tensors().size());
    for (std::size_t i = 0; i < producers.size(); ++i) producers[i] = src->producer(i);
    const ModelSource* source = src.get();
    auto tier = std::make_shared<serve::DeviceTier>(
        src, std::move(producers), device_, [this, model_id](std::int64_t delta) { account(model_id, delta); });
    // Resident bytes decode without the host path's after-decode checksum: each tensor is checked before upload.
    auto verify = [source](std::size_t i) { return source->verify_stored(i); };
    std::vector<std::string> warnings;
    Model made;
    made.tier = tier;
    // The tensors whose compressed form stays on the device (all where the budget has room for the whole tier);
    // their bytes are taken from the budget now, before the region is made.
    const std::uint64_t tier_device_bytes = reserve_tier(*tier, *source);
    const std::uint64_t device_bytes = tier->device_region_bytes();
    Status placed = [&]() -> Status {
      if (tier_device_bytes != tier->tier_bytes()) {
        // Held tensors left in host memory: the model's host tier, filled in the background (each decode of one
        // waits for that tensor only); intq tensors left there: their forms in pinned memory at their first decode.
        if (device_bytes != tier->region_bytes()) {
          EPK_TRY_ASSIGN(made.host, host_tiers_->get(model_id, *tier, src, device_));
        }
        EPK_TRY(tier->bind_host(made.host ? made.host->bytes() : std::span<const std::byte>(), host_tier_staging_,
                                verify));
        if (tier_device_bytes == 0) return {};  // all in host memory: nothing on the device until a decode needs it
      }
      if (device_bytes != 0) {
        EPK_TRY_ASSIGN(std::unique_ptr<shm::DevicePool> pool, shm::DevicePool::create(device_, device_bytes));
        made.region = std::move(pool);
        account(model_id, static_cast<std::int64_t>(made.region->size()));
      }
      return tier->upload(made.region ? made.region->device_ptr() : DeviceAddress(), cs(stream_), verify,
                          cuda::OutputFormat::kBf16, &warnings);
    }();
    for (const std::string& w : warnings) spdlog::warn("device {}: {}", device_, w);
    std::lock_guard<std::mutex> lock(mu_);
    const std::uint64_t added = model_bytes_[model_id];
    if (!placed) {
      resident_bytes_ -= std::min(resident_bytes_, added);
      model_bytes_.erase(model_id);
      tier_region_bytes_ -= std::min(tier_region_bytes_, tier_device_bytes);
      return placed.error();
    }
    TierAdded out{tier->tier_bytes(), tier_device_bytes, made.host ? made.host->size() : 0, added};
    models_[model_id] = std::move(made);
    return out;
  }

  std::uint64_t remove_model(std::uint32_t model_id) override {
    Model made;
    std::uint64_t freed = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto m = models_.find(model_id); m != models_.end()) {
        made = std::move(m->second);
        models_.erase(m);
        tier_region_bytes_ -= std::min(tier_region_bytes_, made.tier->device_tier_bytes());
      }
      if (auto b = model_bytes_.find(model_id); b != model_bytes_.end()) {
        freed = b->second;
        resident_bytes_ -= std::min(resident_bytes_, freed);
        model_bytes_.erase(b);
      }
    }
    // Device memory is freed with this device's context current; nothing on the stream reads it (produce() waits for
    // its work, and no decode of a retired model's last slots is in flight).
    (void)shm::make_device_current(device_);
    made = Model();
    return freed;
  }

  Status produce(std::uint32_t model_id, const ModelSource& src, std::size_t tensor, shm::Layout layout,
                 const shm::ShardRange& shard, std::uint64_t slot_offset, std::uint64_t bytes, std::uint64_t slot_id,
                 bool* on_device, const std::function<void()>& on_enqueued) override {
    *on_device = false;
    std::shared_ptr<serve::DeviceTier> tier;
    std::shared_ptr<HostTier> host;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto m = models_.find(model_id); m != models_.end() && tensor < m->second.tier->tensors()) {
        tier = m->second.tier;
        host = m->second.host;
      }
    }
    // A tensor decoded from the host tier: its bytes in place and checked first (filled here during the cold start
    // if no filler has reached it); its checksum error otherwise, as the CPU path would give.
    if (host && !tier->on_device(tensor)) EPK_TRY(host->ready(tensor));
    EPK_TRY(shm::make_device_current(device_));
    const DeviceAddress dst = pool_base_ + slot_offset;
    Status enqueued = [&]() -> Status {
      serve::DeviceWrite w;
      if (tier) {
        const std::uint64_t staged_before = tier->staged_bytes();
        EPK_TRY_ASSIGN(w, tier->enqueue(tensor, layout, shard, dst, bytes, work_, cs(stream_)));
        staged_bytes_.fetch_add(tier->staged_bytes() - staged_before, std::memory_order_relaxed);
      }
      if (!w.note.empty()) spdlog::warn("device {}: {}", device_, w.note);
      if (w.path == serve::DevicePath::kHost) {
        EPK_TRY(produce_on_host(src, tensor, layout, shard, dst, bytes));
        if (w.form == serve::DevicePath::kIntqKernels) ++intq_host_slots_;
        if (!shard.whole()) ++host_shard_slots_;
      } else {
        *on_device = true;
        if (w.path == serve::DevicePath::kIntqKernels) ++intq_kernel_slots_;
      }
      EPK_TRY(ring_[event_for(slot_id)].record(stream_.get()));
      last_enqueued_ns_ = std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::steady_clock::now().time_since_epoch())
                              .count();
      return {};
    }();
    if (enqueued && on_enqueued) {
      try {  // the sync below must run whatever the callback does: the queued copies read pinned buffers
        on_enqueued();
      } catch (...) {
        spdlog::error("device {}: the enqueue callback threw; the decode goes on", device_);
      }
    }
    // Synchronised on failure too: the next produce() reuses the staging buffer and the plans' pinned patch and
    // status, which a copy queued before the failure may still read.
    Status synced = stream_.synchronize();
    if (!enqueued) {
      if (tier) tier->forget();
      return enqueued;
    }
    EPK_TRY(synced);
    return tier ? tier->check(cs(stream_)) : Status{};
  }

  Result<std::unique_ptr<shm::Fence>> client_fence(ClientId client, const shm::IpcEventHandle& handle) override {
    std::shared_ptr<ClientLinks> links;
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::shared_ptr<ClientLinks>& l = clients_[client];
      if (!l) l = std::make_shared<ClientLinks>();
      links = l;
    }
    // One client's releases arrive on its session's thread in order; the lock is for the links' map against a
    // drop_client() of the same client, which the session's close runs on that thread too.
    std::lock_guard<std::mutex> lock(links->mu);
    EPK_TRY(shm::make_device_current(device_));
    auto it = links->by_handle.find(handle);
    if (it == links->by_handle.end()) {
      if (links->by_handle.size() >= kMaxClientEvents) {
        return make_error(ErrorCode::kInvalidArgument, "release: more than " + std::to_string(kMaxClientEvents) +
                                                           " distinct CUDA events from one client");
      }
      ClientLink fresh;
      EPK_TRY_ASSIGN(fresh.event, shm::CudaEvent::open_ipc(handle, device_));
      EPK_TRY_ASSIGN(fresh.side, shm::CudaStream::create(device_));
      it = links->by_handle.emplace(handle, std::move(fresh)).first;
    }
    // A client whose work is over already (its stream idle by the time the release is read, as in a cache-hit loop)
    // needs no fence: a query now reads the same snapshot (the event's latest record) that the wait below would take,
    // and nothing is queued on the device. A failed query falls through: the wait reports a bad event.
    if (Result<bool> done = it->second.event.poll(); done && *done) {
      fence_done_at_release_.fetch_add(1, std::memory_order_relaxed);
      return std::unique_ptr<shm::Fence>();
    }
    // The wait snapshots the client's latest record now; the marker after it answers for exactly this release.
    const auto t0 = std::chrono::steady_clock::now();
    EPK_TRY(it->second.side.wait(it->second.event.get()));
    const auto t1 = std::chrono::steady_clock::now();
    EPK_TRY_ASSIGN(std::unique_ptr<FencePool::Fence> fence, fences_->take());
    EPK_TRY(markers_->record(fence->index(), it->second.side.get()));
    fence->arm();
    const auto t2 = std::chrono::steady_clock::now();
    fence_calls_.fetch_add(1, std::memory_order_relaxed);
    fence_wait_ns_.fetch_add((t1 - t0).count(), std::memory_order_relaxed);
    fence_marker_ns_.fetch_add((t2 - t1).count(), std::memory_order_relaxed);
    return std::unique_ptr<shm::Fence>(std::move(fence));
  }

  // Markers not yet complete, plus side streams with work left (a wait queued before its marker could be taken, or
  // the streams of clients gone): each may hold a device teardown until a client's kernels finish.
  std::size_t pending_fences() override {
    std::size_t n = fences_->pending();
    if (!shm::make_device_current(device_)) return n + 1;  // cannot tell: count it as pending
    std::vector<std::shared_ptr<ClientLinks>> all;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [client, links] : clients_) all.push_back(links);
      all.insert(all.end(), retired_.begin(), retired_.end());
    }
    for (const auto& links : all) {
      std::lock_guard<std::mutex> lock(links->mu);
      for (const auto& [handle, link] : links->by_handle) {
        Result<bool> idle = shm::stream_idle(link.side.get(), device_);
        if (!idle || !*idle) ++n;
      }
    }
    return n;
  }

  std::int64_t last_enqueued_ns() const override { return last_enqueued_ns_; }

  void drop_client(ClientId client) override {
    std::shared_ptr<ClientLinks> links;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = clients_.find(client);
      if (it == clients_.end()) return;
      links = std::move(it->second);
      clients_.erase(it);
    }
    // Its fences still guard their slots (the markers complete after the queued waits). The opened events and side
    // streams are kept until their streams are idle, so that pending_fences() sees a wait still queued there;
    // retired links whose streams are idle go now.
    (void)shm::make_device_current(device_);
    std::vector<std::shared_ptr<ClientLinks>> idle;
    std::lock_guard<std::mutex> lock(mu_);
    retired_.push_back(std::move(links));
    std::erase_if(retired_, [&](const std::shared_ptr<ClientLinks>& l) {
      std::lock_guard<std::mutex> ll(l->mu);
      for (const auto& [handle, link] : l->by_handle) {
        Result<bool> done = shm::stream_idle(link.side.get(), device_);
        if (!done || !*done) return false;
      }
      idle.push_back(l);  // destroyed below, outside this lock
      return true;
    });
  }

 private:
  static constexpr std::size_t kMaxClientEvents = 64;
  // Markers for release fences on this device: far more than the slots a lane's clients release at once; past it a
  // release is refused (kNoSpace) until fences complete.
  static constexpr std::size_t kFenceMarkers = 4096;

  struct HandleHash {
    std::size_t operator()(const shm::IpcEventHandle& h) const {
      std::uint64_t x = 1469598103934665603ull;
      for (std::uint8_t b : h) x = (x ^ b) * 1099511628211ull;
      return static_cast<std::size_t>(x);
    }
  };

  std::optional<TierExport> tier(std::uint32_t model_id) const override {
    std::lock_guard<std::mutex> lock(mu_);
    auto m = models_.find(model_id);
    if (m == models_.end()) return std::nullopt;
    if (m->second.host) {
      // Only a sealed tier whose every tensor passed its checksum: a client reads it without checking.
      if (!m->second.host->outcome()) return std::nullopt;
      return TierExport{m->second.host->fd(), m->second.host->size(), true};
    }
    if (!m->second.region) return std::nullopt;
    return TierExport{m->second.region->export_fd(), m->second.region->size(), false};
  }

  bool when_tier_ready(std::uint32_t model_id, std::function<void()> then) override {
    std::shared_ptr<HostTier> host;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto m = models_.find(model_id); m != models_.end()) host = m->second.host;
    }
    if (!host || host->complete()) return false;
    host->when_complete(std::move(then));  // runs it at once if the tier completed just now
    return true;
  }

  // Places `tier`'s tensors (DeviceTier::place): all on the device where what the tier budget leaves holds the whole
  // tier, else those daemon/lanes/tier_placement.h picks within it. Takes the bytes of those on the device from the
  // budget before the region is made (two models added at once never both take the last room) and returns them.
  std::uint64_t reserve_tier(serve::DeviceTier& tier, const ModelSource& src) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::uint64_t left = tier_budget_ == kNoTierBudget ? kNoTierBudget
                               : tier_region_bytes_ >= tier_budget_ ? 0
                                                                    : tier_budget_ - tier_region_bytes_;
    if (tier.tier_bytes() > left) {
      std::vector<std::string> names(tier.tensors());
      std::vector<std::uint64_t> footprint(tier.tensors());
      for (std::size_t i = 0; i < tier.tensors(); ++i) {
        names[i] = src.tensors()[i].name;
        footprint[i] = tier.footprint(i);
      }
      tier.place(place_tier(names, footprint, left));
    }
    tier_region_bytes_ += tier.device_tier_bytes();
    return tier.device_tier_bytes();
  }

  // Resident bytes of `model` (or the lane's own: nullopt) changed by delta.
  void account(std::optional<std::uint32_t> model, std::int64_t delta) {
    std::lock_guard<std::mutex> lock(mu_);
    auto apply = [delta](std::uint64_t& v) {
      v = delta >= 0 ? v + static_cast<std::uint64_t>(delta) : v - std::min(v, static_cast<std::uint64_t>(-delta));
    };
    apply(resident_bytes_);
    if (model) apply(model_bytes_[*model]);
  }

  Status produce_on_host(const ModelSource& src, std::size_t tensor, shm::Layout layout, const shm::ShardRange& shard,
                         DeviceAddress dst, std::uint64_t bytes) {
    if (staging_.size() < bytes) {
      staging_ = shm::PinnedBuffer();
      EPK_TRY_ASSIGN(staging_, shm::PinnedBuffer::alloc(bytes, device_));
    }
    const std::span<std::uint8_t> out(staging_.data(), bytes);
    EPK_TRY(shard.whole() ? src.produce(tensor, layout, out) : src.produce_shard(tensor, layout, shard, out));
    return shm::copy_to_device_async(dst, staging_.data(), bytes, stream_.get(), device_);
  }

  const int device_;
  const std::uint64_t tier_budget_;  // device bytes for models' tier regions (kNoTierBudget: no limit)
  const std::shared_ptr<HostTiers> host_tiers_;
  const DeviceAddress pool_base_;
  shm::CudaStream stream_;
  std::vector<shm::CudaEvent> ring_;
  std::vector<shm::IpcEventHandle> handles_;
  shm::PinnedBuffer staging_;  // CPU fallback output, grown as needed (GPU thread only)
  serve::ColumnWork work_;  // column shards' whole decode, for every model of the lane (GPU thread only)
  serve::StagingArea host_tier_staging_;  // host-tier decodes' inputs, for every model of the lane (GPU thread only)
  std::int64_t last_enqueued_ns_ = 0;       // GPU thread only
  mutable std::mutex mu_;      // models_, resident_bytes_, model_bytes_, clients_, retired_
  // A model's device tier and its region (null: no tensor of it is in a region); the tier is used by the GPU thread
  // only once published here.
  struct Model {
    std::shared_ptr<serve::DeviceTier> tier;
    std::shared_ptr<shm::DevicePool> region;  // the tier on the device
    std::shared_ptr<HostTier> host;           // or in the model's host tier
  };
  std::unordered_map<std::uint32_t, Model> models_;
  std::atomic<std::uint64_t> intq_kernel_slots_{0}, intq_host_slots_{0};  // written on the GPU thread (exit log)
  std::atomic<std::uint64_t> host_shard_slots_{0};  // shards the CPU path produced (exit log)
  std::uint64_t resident_bytes_ = 0;
  std::uint64_t tier_region_bytes_ = 0;  // device tiers of models_ and of those being made (the tier budget's)
  std::atomic<std::uint64_t> staged_bytes_{0};
  std::unordered_map<std::uint32_t, std::uint64_t> model_bytes_;  // resident_bytes_ by model
  // A client's release events, each opened once, with the side stream that waits on it.
  struct ClientLink {
    shm::CudaEvent event;
    shm::CudaStream side;
  };
  struct ClientLinks {
    std::mutex mu;
    std::unordered_map<shm::IpcEventHandle, ClientLink, HandleHash> by_handle;
  };
  std::unordered_map<ClientId, std::shared_ptr<ClientLinks>> clients_;
  std::vector<std::shared_ptr<ClientLinks>> retired_;  // links of clients gone, until their side streams are idle
  CudaMarkers* markers_ = nullptr;  // owned by fences_
  // The exit log's figures.
  std::atomic<std::uint64_t> fence_calls_{0}, fence_wait_ns_{0}, fence_marker_ns_{0}, fence_done_at_release_{0};
  std::shared_ptr<FencePool> fences_;  // fences in the cache keep it (and the markers) alive
};

}  // namespace

int gpu_device_count() { return shm::cuda_device_count(); }
bool gpu_device_present(int device) { return shm::cuda_device_available(device); }

std::shared_ptr<HostTiers> make_host_tiers(int threads) { return std::make_shared<HostTiers>(threads); }

Result<GpuSetup> make_gpu_setup(int device, std::uint64_t budget_bytes, std::uint32_t ring_events,
                                std::uint64_t tier_budget, std::shared_ptr<HostTiers> host_tiers) {
  if (ring_events == 0 || ring_events > shm::kMaxEvents) {
    return make_error(ErrorCode::kInvalidArgument, "GPU event ring length out of range");
  }
  EPK_TRY_ASSIGN(std::unique_ptr<shm::DevicePool> pool, shm::DevicePool::create(device, budget_bytes));
  EPK_TRY_ASSIGN(shm::CudaStream stream, shm::CudaStream::create(device));
  std::vector<shm::CudaEvent> ring;
  std::vector<shm::IpcEventHandle> handles;
  for (std::uint32_t i = 0; i < ring_events; ++i) {
    EPK_TRY_ASSIGN(shm::CudaEvent ev, shm::CudaEvent::create_interprocess(device));
    // Recorded once on the empty stream, so that a wait before the first decode does not wait on nothing forever.
    EPK_TRY(ev.record(stream.get()));
    EPK_TRY_ASSIGN(shm::IpcEventHandle h, ev.ipc_handle());
    ring.push_back(std::move(ev));
    handles.push_back(h);
  }
  const DeviceAddress base = pool->device_ptr();
  GpuSetup out;
  out.backend = std::make_unique<CudaBackend>(device, base, std::move(stream), std::move(ring), std::move(handles),
                                              tier_budget, std::move(host_tiers));
  out.pool = std::move(pool);
  return out;
}

}  // namespace epk::daemon
