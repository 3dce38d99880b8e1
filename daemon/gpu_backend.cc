#include "daemon/gpu_backend.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <string_view>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "codec/cuda/decode.h"
#include "codec/cuda/decode_desc.h"
#include "codec/cuda/tier_layout.h"
#include "codec/rans/stream.h"
#include "daemon/fence_pool.h"
#include "daemon/gpu_intq.h"
#include "shm/cuda_event.h"
#include "shm/decode_format.h"
#include "shm/device_pool.h"
#include "shm/layout.h"

namespace epk::daemon {
namespace {

// One tensor's decode inputs on the device, and the plans built for it (one per output format and row range, scratch
// uploaded): the whole tensor's rows, or a row shard's.
struct PlanKey {
  cuda::OutputFormat format;
  std::uint32_t row_begin = 0, row_end = 0;
  auto operator<=>(const PlanKey&) const = default;
};
struct Resident {
  struct Plan {
    cuda::DecodePlan plan;
    shm::DeviceBuffer scratch;
  };
  std::string name;
  std::uint32_t model = 0;  // its model id (resident bytes are counted per model)
  std::shared_ptr<const ModelSource> source_model;  // keeps `stream` valid: plan_for() reads it on a first use
  const rans::LatticeRansStream* stream = nullptr;
  DType source = DType::kF32;
  std::shared_ptr<const shm::DevicePool> tier;  // the model's compressed tier, which `dev` points into
  cuda::DeviceBuffers dev;
  std::map<PlanKey, Plan> plans;  // touched by the GPU thread only (and add_model before publication)
  // The row-range plans among them, oldest first: at most kMaxRangePlans are kept, since any client may ask for any
  // row range and each plan holds device scratch outside the budget (whole-tensor plans: one per format).
  std::deque<PlanKey> range_plans;
  PlanKey whole(cuda::OutputFormat f) const { return {f, 0, stream->rows}; }
  bool is_whole(const PlanKey& k) const { return k.row_begin == 0 && k.row_end == stream->rows; }
};
// Row-range plans kept per resident tensor: enough for every rank of one world size up to 8 in one format.
constexpr std::size_t kMaxRangePlans = 8;

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

double mean_us(std::uint64_t total_ns, std::uint64_t n) {
  return n == 0 ? 0.0 : static_cast<double>(total_ns) / 1e3 / static_cast<double>(n);
}

class CudaBackend final : public GpuBackend {
 public:
  CudaBackend(int device, std::uint64_t pool_base, shm::CudaStream stream, std::vector<shm::CudaEvent> ring,
              std::vector<shm::IpcEventHandle> handles, shm::PinnedBuffer patch)
      : device_(device),
        pool_base_(pool_base),
        stream_(std::move(stream)),
        ring_(std::move(ring)),
        handles_(std::move(handles)),
        patch_(std::move(patch)) {
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

  Result<std::uint64_t> add_model(std::uint32_t model_id, std::shared_ptr<const ModelSource> src) override {
    std::uint64_t added = 0;
    if (!status_.data()) {
      EPK_TRY_ASSIGN(status_, shm::PinnedBuffer::alloc(sizeof(cuda::DecodeStatus), device_));
    }
    std::vector<std::shared_ptr<Resident>> made(src->tensors().size());
    std::vector<std::shared_ptr<gpu_intq::Tensor>> made_intq(src->tensors().size());
    for (std::size_t i = 0; i < src->tensors().size(); ++i) {
      if (src->intq_header(i) != nullptr) {
        // intq "int" tensors: their logical form, for the repack and dequantize kernels (daemon/gpu_intq.h). One
        // that cannot be uploaded (device memory) stays on the CPU path; the model's other tensors keep the tier.
        EPK_TRY(src->verify_stored(i));
        auto q = gpu_intq::upload(*src, i, device_, stream_);
        if (!q) {
          spdlog::warn("device {}: intq tensor '{}' not resident ({}); the CPU path serves it", device_,
                       src->tensors()[i].name, q.error().to_string());
          continue;
        }
        added += (*q)->variants[0]->bytes;
        made_intq[i] = std::move(*q);
      }
    }
    // Lattice-rans tensors: their stored buffers in one shareable region, placed by the rule libepk's client-side
    // decode reads them by (codec/cuda/tier_layout.h). Bytes outside the buffers are zero.
    std::vector<const rans::LatticeRansStream*> streams(src->tensors().size(), nullptr);
    for (std::size_t i = 0; i < streams.size(); ++i) streams[i] = src->lattice_stream(i);
    const cuda::TierLayout layout = cuda::tier_layout(streams);
    std::shared_ptr<shm::DevicePool> tier;
    if (layout.bytes != 0) {
      EPK_TRY_ASSIGN(std::unique_ptr<shm::DevicePool> pool, shm::DevicePool::create(device_, layout.bytes));
      tier = std::move(pool);
      EPK_TRY(shm::fill_device_async(tier->device_ptr(), 0, tier->size(), stream_.get(), device_));
      added += tier->size();
    }
    for (std::size_t i = 0; i < streams.size(); ++i) {
      const rans::LatticeRansStream* s = streams[i];
      if (s == nullptr) continue;
      // Resident bytes are decoded without produce()'s after-decode checksum: check them once here.
      EPK_TRY(src->verify_stored(i));
      auto r = std::make_shared<Resident>();
      r->name = src->tensors()[i].name;
      r->model = model_id;
      r->source_model = src;
      r->stream = s;
      r->source = src->tensors()[i].dtype;
      r->tier = tier;
      const cuda::TierPlacement& at = *layout.tensors[i];
      const std::uint64_t base = tier->device_ptr();
      EPK_TRY(copy_in(base + at.payload, s->payload));
      EPK_TRY(copy_in(base + at.offsets, s->offsets));
      EPK_TRY(copy_in(base + at.states, s->states));
      EPK_TRY(copy_in(base + at.scales, s->scales));
      r->dev = cuda::tier_buffers(base, at);
      // bf16 is the common serving layout: its plan is ready before the first acquire.
      EPK_TRY(plan_for(*r, r->whole(cuda::OutputFormat::kBf16)));
      for (const auto& [f, p] : r->plans) added += p.scratch.size();
      made[i] = std::move(r);
    }
    EPK_TRY(stream_.synchronize());  // the uploads read host memory owned by the source and the plans
    std::lock_guard<std::mutex> lock(mu_);
    models_[model_id] = std::move(made);
    intq_[model_id] = std::move(made_intq);
    if (tier) tiers_[model_id] = std::move(tier);
    resident_bytes_ += added;
    model_bytes_[model_id] += added;
    return added;
  }

  std::uint64_t remove_model(std::uint32_t model_id) override {
    std::vector<std::shared_ptr<Resident>> made;
    std::vector<std::shared_ptr<gpu_intq::Tensor>> made_intq;
    std::shared_ptr<const shm::DevicePool> tier;
    std::uint64_t freed = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto m = models_.find(model_id); m != models_.end()) {
        made = std::move(m->second);
        models_.erase(m);
      }
      if (auto q = intq_.find(model_id); q != intq_.end()) {
        made_intq = std::move(q->second);
        intq_.erase(q);
      }
      if (auto t = tiers_.find(model_id); t != tiers_.end()) {
        tier = std::move(t->second);
        tiers_.erase(t);
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
    made.clear();
    made_intq.clear();
    tier.reset();
    return freed;
  }

  Status produce(std::uint32_t model_id, const ModelSource& src, std::size_t tensor, shm::Layout layout,
                 const shm::ShardRange& shard, std::uint64_t slot_offset, std::uint64_t bytes, std::uint64_t slot_id,
                 bool* on_device, const std::function<void()>& on_enqueued) override {
    *on_device = false;
    pending_plan_ = nullptr;
    std::shared_ptr<Resident> r;
    std::shared_ptr<gpu_intq::Tensor> q;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto m = models_.find(model_id);
      if (m != models_.end() && tensor < m->second.size()) r = m->second[tensor];
      auto iq = intq_.find(model_id);
      if (iq != intq_.end() && tensor < iq->second.size()) q = iq->second[tensor];
    }
    EPK_TRY(shm::make_device_current(device_));
    const std::uint64_t dst = pool_base_ + slot_offset;
    std::optional<cuda::OutputFormat> fmt = r ? shm::decode_format(layout, r->source) : std::nullopt;
    // Row shards decode their rows on the device; column shards decode the whole tensor into the column scratch and
    // copy their columns; shards of anything else take the CPU path.
    const bool host_shard = !shard.whole() && !fmt;
    Status enqueued = [&]() -> Status {
      bool intq_kernels = false;
      if (q && shard.whole()) {  // the intq kernels write whole tensors only
        std::uint64_t added = 0;
        // A layout the kernels cannot be set up for (its padded variant does not fit the device, say) goes to the
        // CPU path like any layout they do not cover.
        auto covered = gpu_intq::covers(*q, src, tensor, layout, device_, stream_, &added);
        if (!covered) {
          spdlog::warn("device {}: intq tensor {}: the kernels' setup failed ({}); the CPU path serves it", device_,
                       tensor, covered.error().to_string());
        }
        intq_kernels = covered && *covered;
        if (added != 0) {
          std::lock_guard<std::mutex> lock(mu_);
          resident_bytes_ += added;
          model_bytes_[model_id] += added;
        }
      }
      if (fmt && shard.dim == shm::ShardDim::kCols) {
        EPK_TRY(decode_columns(*r, *fmt, shard, dst, bytes));
        *on_device = true;
      } else if (fmt) {
        const PlanKey key = shard.whole() ? r->whole(*fmt)
                                          : PlanKey{*fmt, static_cast<std::uint32_t>(shard.begin),
                                                    static_cast<std::uint32_t>(shard.end)};
        EPK_TRY(decode_on_device(*r, key, dst, bytes));
        *on_device = true;
      } else if (intq_kernels) {
        EPK_TRY(gpu_intq::produce(*q, src, tensor, layout, dst, bytes, device_, stream_));
        *on_device = true;
        ++intq_kernel_slots_;
      } else {
        EPK_TRY(produce_on_host(src, tensor, layout, shard, dst, bytes));
        if (q) ++intq_host_slots_;
        if (host_shard) ++host_shard_slots_;
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
    // Synchronised on failure too: the next produce() reuses the pinned patch, staging and status buffers, which a
    // copy queued before the failure may still read.
    Status synced = stream_.synchronize();
    if (!enqueued) {
      pending_plan_ = nullptr;
      return enqueued;
    }
    EPK_TRY(synced);
    return check_status();
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

  template <class T>
  Status copy_in(std::uint64_t dst, std::span<const T> src) {
    if (src.empty()) return {};
    return shm::copy_to_device_async(dst, src.data(), src.size_bytes(), stream_.get(), device_);
  }

  std::optional<TierExport> tier(std::uint32_t model_id) const override {
    std::lock_guard<std::mutex> lock(mu_);
    auto t = tiers_.find(model_id);
    if (t == tiers_.end()) return std::nullopt;
    return TierExport{t->second->export_fd(), t->second->size()};
  }

  Status plan_for(Resident& r, const PlanKey& key) {
    if (r.plans.count(key) != 0) return {};
    const cuda::OutputFormat fmt = key.format;
    cuda::DecodeJob job;
    job.name = r.name;
    job.stream = r.stream;
    job.dev = r.dev;
    job.row_begin = key.row_begin;
    job.row_end = key.row_end;
    job.format = fmt;
    // Placeholders, patched per decode (decode_on_device): the pool's base is a valid, aligned device address.
    job.out_dev = reinterpret_cast<void*>(pool_base_);
    job.row_scales_dev = cuda::is_rowwise(fmt) ? reinterpret_cast<float*>(pool_base_) : nullptr;
    EPK_TRY_ASSIGN(cuda::DecodePlan plan, cuda::DecodePlan::create(std::span<const cuda::DecodeJob>(&job, 1)));
    EPK_TRY_ASSIGN(shm::DeviceBuffer scratch, shm::DeviceBuffer::alloc(plan.scratch_bytes(), device_));
    EPK_TRY(cuda::upload(plan, reinterpret_cast<void*>(scratch.ptr()), plan.scratch_bytes(),
                         static_cast<cuda::Stream>(stream_.get())));
    r.plans.emplace(key, Resident::Plan{std::move(plan), std::move(scratch)});
    return {};
  }

  // Decodes rows [key.row_begin, key.row_end) of r in key.format into the slot at dst (bytes long).
  Status decode_on_device(Resident& r, const PlanKey& key, std::uint64_t dst, std::uint64_t bytes) {
    const cuda::OutputFormat fmt = key.format;
    if (r.plans.count(key) == 0) {
      if (!r.is_whole(key) && r.range_plans.size() >= kMaxRangePlans) {
        // The oldest range plan goes: nothing still uses it (each produce() synchronises the stream before returning).
        auto old = r.plans.find(r.range_plans.front());
        r.range_plans.pop_front();
        if (old != r.plans.end()) {
          const std::uint64_t freed = old->second.scratch.size();
          r.plans.erase(old);
          std::lock_guard<std::mutex> lock(mu_);
          resident_bytes_ -= std::min(resident_bytes_, freed);
          model_bytes_[r.model] -= std::min(model_bytes_[r.model], freed);
        }
      }
      EPK_TRY(plan_for(r, key));
      if (!r.is_whole(key)) r.range_plans.push_back(key);
      std::lock_guard<std::mutex> lock(mu_);
      resident_bytes_ += r.plans.at(key).scratch.size();
      model_bytes_[r.model] += r.plans.at(key).scratch.size();
    }
    Resident::Plan& p = r.plans.at(key);
    // The slot's address (and its row scales' for rowwise formats) into the plan's one descriptor.
    std::uint64_t scales_dst = 0;
    const std::uint64_t rows = key.row_end - key.row_begin;
    if (cuda::is_rowwise(fmt)) {
      const std::uint64_t values = rows * r.stream->cols;
      const std::uint64_t at = shm::rowwise_scales_offset(rows, r.stream->cols);
      if (at + rows * 4 != bytes) return make_error(ErrorCode::kInternal, "tensor '" + r.name + "': rowwise slot size");
      scales_dst = dst + at;
      // Padding between values and scales: no stale bytes of an earlier slot (as the CPU path).
      if (at > values) EPK_TRY(shm::fill_device_async(dst + values, 0, at - values, stream_.get(), device_));
    } else if (rows * r.stream->cols * cuda::output_element_bytes(fmt) != bytes) {
      return make_error(ErrorCode::kInternal, "tensor '" + r.name + "': dense slot size");  // never write past a slot
    }
    std::uint64_t patch[2] = {dst, scales_dst};
    std::memcpy(patch_.data(), patch, sizeof(patch));  // the previous produce() synchronised: the buffer is free
    const std::uint64_t desc = p.scratch.ptr() + p.plan.descs_offset();
    EPK_TRY(shm::copy_to_device_async(desc + offsetof(cuda::detail::TensorDesc, out), patch_.data(), sizeof(patch),
                                      stream_.get(), device_));
    static_assert(offsetof(cuda::detail::TensorDesc, row_scales) ==
                  offsetof(cuda::detail::TensorDesc, out) + sizeof(void*));
    EPK_TRY(cuda::decode(p.plan, reinterpret_cast<void*>(p.scratch.ptr()), static_cast<cuda::Stream>(stream_.get())));
    // The status comes back on the stream into pinned memory, so the one synchronisation in produce() covers both
    // the decode and its status; check_status() reads it afterwards.
    pending_plan_ = &p;
    pending_name_ = &r.name;
    return shm::copy_from_device_async(status_.data(), p.scratch.ptr() + p.plan.status_offset(),
                                       sizeof(cuda::DecodeStatus), stream_.get(), device_);
  }

  // A column shard [c0, c1) of r: the whole tensor decoded into col_scratch_ (grown to the largest such tensor, kept,
  // counted in resident_bytes), then its columns copied row by row into the slot (a 2-D copy); rowwise formats take
  // every row's scale. Every tile is decoded: a column shard saves the slot's bytes, not the decode.
  Status decode_columns(Resident& r, cuda::OutputFormat fmt, const shm::ShardRange& shard, std::uint64_t dst,
                        std::uint64_t bytes) {
    const std::uint64_t rows = r.stream->rows, cols = r.stream->cols;
    const bool rowwise = cuda::is_rowwise(fmt);
    const std::uint64_t elem = rowwise ? 1 : cuda::output_element_bytes(fmt);
    const std::uint64_t whole = rowwise ? shm::rowwise_scales_offset(rows, cols) + rows * 4 : rows * cols * elem;
    const std::uint64_t width = shard.extent() * elem;
    const std::uint64_t at = rowwise ? shm::rowwise_scales_offset(rows, shard.extent()) : rows * width;
    if (shard.end > cols || (rowwise ? at + rows * 4 : at) != bytes) {
      return make_error(ErrorCode::kInternal, "tensor '" + r.name + "': column shard slot size");
    }
    if (col_scratch_.size() < whole) {
      {  // the old buffer goes first (its bytes leave the count with it, whether or not the new one comes)
        const std::uint64_t before = col_scratch_.size();
        col_scratch_ = shm::DeviceBuffer();
        std::lock_guard<std::mutex> lock(mu_);
        resident_bytes_ -= std::min(resident_bytes_, before);
      }
      EPK_TRY_ASSIGN(col_scratch_, shm::DeviceBuffer::alloc(whole, device_));
      std::lock_guard<std::mutex> lock(mu_);
      resident_bytes_ += whole;
    }
    const std::uint64_t scratch = col_scratch_.ptr();
    EPK_TRY(decode_on_device(r, r.whole(fmt), scratch, whole));
    EPK_TRY(shm::copy_2d_device_async(dst, width, scratch + shard.begin * elem, cols * elem, width, rows,
                                      stream_.get(), device_));
    if (rowwise) {
      if (at > rows * width) {
        EPK_TRY(shm::fill_device_async(dst + rows * width, 0, at - rows * width, stream_.get(), device_));
      }
      EPK_TRY(shm::copy_2d_device_async(dst + at, rows * 4, scratch + shm::rowwise_scales_offset(rows, cols), rows * 4,
                                        rows * 4, 1, stream_.get(), device_));
    }
    return {};
  }

  // After the stream has synchronised: a corrupt tile of the last device decode is an error naming it (read_status
  // reads the per-tile faults again for the message).
  Status check_status() {
    Resident::Plan* p = pending_plan_;
    pending_plan_ = nullptr;
    if (p == nullptr) return {};
    cuda::DecodeStatus st;
    std::memcpy(&st, status_.data(), sizeof(st));
    if (st.bad_tiles == 0) return {};
    Status named = cuda::read_status(p->plan, reinterpret_cast<void*>(p->scratch.ptr()),
                                     static_cast<cuda::Stream>(stream_.get()));
    return named ? make_error(ErrorCode::kCorruptTile, "tensor '" + *pending_name_ +
                                                           "': a corrupt tile (device decode; its tile status was "
                                                           "not readable)")
                 : named;
  }

  Status produce_on_host(const ModelSource& src, std::size_t tensor, shm::Layout layout, const shm::ShardRange& shard,
                         std::uint64_t dst, std::uint64_t bytes) {
    if (staging_.size() < bytes) {
      staging_ = shm::PinnedBuffer();
      EPK_TRY_ASSIGN(staging_, shm::PinnedBuffer::alloc(bytes, device_));
    }
    const std::span<std::uint8_t> out(staging_.data(), bytes);
    EPK_TRY(shard.whole() ? src.produce(tensor, layout, out) : src.produce_shard(tensor, layout, shard, out));
    return shm::copy_to_device_async(dst, staging_.data(), bytes, stream_.get(), device_);
  }

  const int device_;
  const std::uint64_t pool_base_;
  shm::CudaStream stream_;
  std::vector<shm::CudaEvent> ring_;
  std::vector<shm::IpcEventHandle> handles_;
  shm::PinnedBuffer patch_;    // 16 bytes: the descriptor patch's source (GPU thread only)
  shm::PinnedBuffer staging_;  // CPU fallback output, grown as needed (GPU thread only)
  shm::PinnedBuffer status_;   // the last device decode's DecodeStatus (GPU thread only)
  shm::DeviceBuffer col_scratch_;  // column shards' whole decode (GPU thread only; its bytes in resident_bytes_)
  Resident::Plan* pending_plan_ = nullptr;  // whose status status_ holds, until check_status()
  const std::string* pending_name_ = nullptr;  // that plan's tensor, for the error
  std::int64_t last_enqueued_ns_ = 0;       // GPU thread only
  mutable std::mutex mu_;      // models_, resident_bytes_, clients_, retired_
  std::unordered_map<std::uint32_t, std::vector<std::shared_ptr<Resident>>> models_;
  std::unordered_map<std::uint32_t, std::shared_ptr<const shm::DevicePool>> tiers_;  // per model with lattice tensors
  // intq "int" tensors' device forms, per model (null where a tensor has none). Variants are added on the GPU thread.
  std::unordered_map<std::uint32_t, std::vector<std::shared_ptr<gpu_intq::Tensor>>> intq_;
  std::atomic<std::uint64_t> intq_kernel_slots_{0}, intq_host_slots_{0};  // written on the GPU thread (exit log)
  std::atomic<std::uint64_t> host_shard_slots_{0};  // shards the CPU path produced (exit log)
  std::uint64_t resident_bytes_ = 0;
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

Result<GpuSetup> make_gpu_setup(int device, std::uint64_t budget_bytes, std::uint32_t ring_events) {
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
  EPK_TRY_ASSIGN(shm::PinnedBuffer patch, shm::PinnedBuffer::alloc(16, device));
  const std::uint64_t base = pool->device_ptr();
  GpuSetup out;
  out.backend = std::make_unique<CudaBackend>(device, base, std::move(stream), std::move(ring), std::move(handles),
                                              std::move(patch));
  out.pool = std::move(pool);
  return out;
}

}  // namespace epk::daemon
