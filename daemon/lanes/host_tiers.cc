#include "daemon/lanes/host_tiers.h"

#include <spdlog/spdlog.h>

namespace epk::daemon {

HostTier::HostTier(std::uint32_t model_id, shm::HostTierMemory memory, std::vector<serve::DeviceTier::HostPart> parts,
                   std::shared_ptr<const ModelSource> src, int device)
    : model_id_(model_id),
      device_(device),
      src_(std::move(src)),
      parts_(std::move(parts)),
      part_of_(src_->tensors().size(), -1),
      memory_(std::move(memory)),
      state_(std::make_unique<std::atomic<std::uint8_t>[]>(parts_.size())),
      results_(parts_.size()) {
  for (std::size_t k = 0; k < parts_.size(); ++k) {
    state_[k].store(kPending, std::memory_order_relaxed);
    part_of_[parts_[k].tensor] = static_cast<std::int64_t>(k);
  }
  if (parts_.empty()) finish();
}

HostTier::~HostTier() {
  abandoned_.store(true);  // a finish() under way skips the registration: no one will copy from this tier
  if (finisher_.joinable()) {
    // Never the finisher itself (a callback it runs holding the last reference): it ends right after.
    if (finisher_.get_id() == std::this_thread::get_id()) {
      finisher_.detach();
    } else {
      finisher_.join();
    }
  }
  // Gone before it completed (its model removed during the cold start): what waits on it is answered now, and finds
  // the model gone.
  std::vector<std::function<void()>> then;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!complete_) then.swap(then_);
  }
  for (std::function<void()>& f : then) f();
}

bool HostTier::fill_next() {
  for (;;) {
    const std::size_t k = next_.fetch_add(1);
    if (k >= parts_.size()) return false;
    std::uint8_t pending = kPending;
    if (state_[k].compare_exchange_strong(pending, kFilling)) {
      (void)fill(k);
      return true;
    }
  }
}

// The caller moved part k from kPending to kFilling: it alone writes the part's bytes.
Status HostTier::fill(std::size_t k) {
  Status st = src_->verify_stored(parts_[k].tensor);  // reads the model's map and hashes: safe on several threads
  if (st) serve::DeviceTier::write_host_part(memory_.writable(), parts_[k]);
  results_[k] = st;
  bool last = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    state_[k].store(kDone, std::memory_order_release);
    last = ++done_ == parts_.size();
  }
  filled_.notify_all();
  // The seal and the registration (seconds for tens of GB) on a thread of their own, not on a lane's GPU thread
  // that filled the last part for its decode. Only one caller completes the last part.
  if (last) finisher_ = std::thread([this] { finish(); });
  return st;
}

Status HostTier::ready(std::size_t tensor) {
  if (tensor >= part_of_.size() || part_of_[tensor] < 0) return {};
  const auto k = static_cast<std::size_t>(part_of_[tensor]);
  std::uint8_t pending = kPending;
  if (state_[k].compare_exchange_strong(pending, kFilling)) return fill(k);
  if (state_[k].load(std::memory_order_acquire) != kDone) {
    std::unique_lock<std::mutex> lock(mu_);
    filled_.wait(lock, [&] { return state_[k].load(std::memory_order_acquire) == kDone; });
  }
  return results_[k];
}

// Once: on the finisher thread (or the constructor's, for a tier of no tensor).
void HostTier::finish() {
  Status outcome = outcome_now();
  serve::DeviceTier::zero_host_tail(memory_.writable(), parts_);
  // The seal before the registration: F_SEAL_WRITE waits for, then refuses, pages the driver holds pinned.
  if (Status sealed = memory_.seal(); !sealed) {
    spdlog::error("host_tier model_id={} sealed=false error=\"{}\" note=\"not passed to clients\"", model_id_,
                  sealed.error().to_string());
  }
  const auto filled_at = std::chrono::steady_clock::now();
  const std::span<const std::byte> all = memory_.bytes();
  // Registered even when the seal failed: epkd's own decodes copy from it (only clients need the seal).
  if (!abandoned_.load()) {
    Result<shm::HostRegistration> reg = shm::HostRegistration::register_memory(all.data(), all.size(), true, device_);
    if (reg) {
      registration_ = std::move(*reg);
    } else {
      spdlog::warn("host_tier model_id={} registered=false error=\"{}\" note=\"copies to the device run from pageable "
                   "memory (several times slower)\"",
                   model_id_, reg.error().to_string());
    }
  }
  using ms = std::chrono::duration<double, std::milli>;
  spdlog::info("host_tier model_id={} bytes={} tensors={} fill_ms={:.1f} register_ms={:.1f} ok={}", model_id_,
               all.size(), parts_.size(), ms(filled_at - started_).count(),
               ms(std::chrono::steady_clock::now() - filled_at).count(), outcome ? "true" : "false");
  std::vector<std::function<void()>> then;
  {
    std::lock_guard<std::mutex> lock(mu_);
    complete_ = true;
    then.swap(then_);
  }
  for (std::function<void()>& f : then) f();
}

Status HostTier::outcome_now() const {
  for (const Status& st : results_) EPK_TRY(st);  // the first tensor refused, in tensor order
  return {};
}

bool HostTier::complete() const {
  std::lock_guard<std::mutex> lock(mu_);
  return complete_;
}

Status HostTier::outcome() const {
  if (!complete()) {
    return make_error(ErrorCode::kInternal, "host tier of model " + std::to_string(model_id_) + ": still filling");
  }
  if (!memory_.sealed()) {
    return make_error(ErrorCode::kInternal, "host tier of model " + std::to_string(model_id_) + ": not sealed");
  }
  return outcome_now();
}

void HostTier::when_complete(std::function<void()> then) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!complete_) {
      then_.push_back(std::move(then));
      return;
    }
  }
  then();
}

Result<std::shared_ptr<HostTier>> HostTiers::get(std::uint32_t model_id, const serve::DeviceTier& placement,
                                                 std::shared_ptr<const ModelSource> src, int device) {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(tiers_, [](const auto& kv) { return kv.second.expired(); });
  if (auto it = tiers_.find(model_id); it != tiers_.end()) {
    if (std::shared_ptr<HostTier> made = it->second.lock()) return made;
  }
  EPK_TRY_ASSIGN(shm::HostTierMemory memory, shm::HostTierMemory::create(placement.region_bytes(),
                                                                         "epkd-host-tier-" + std::to_string(model_id)));
  auto tier = std::make_shared<HostTier>(model_id, std::move(memory), placement.host_parts(), std::move(src), device);
  tiers_[model_id] = tier;
  filling_.push_back(tier);
  if (fillers_.empty()) {
    for (int i = 0; i < threads_; ++i) fillers_.emplace_back([this] { fill_loop(); });
  }
  work_.notify_all();
  return tier;
}

HostTiers::~HostTiers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_.notify_all();
  for (std::thread& t : fillers_) t.join();
}

// One part at a time of the oldest tier with parts left. A tier is held only while a part is filled, so one its lanes
// dropped goes (on this thread, outside the lock) and leaves the queue.
void HostTiers::fill_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_.wait(lock, [&] { return stop_ || !filling_.empty(); });
    if (stop_) return;
    const std::weak_ptr<HostTier> front = filling_.front();
    std::shared_ptr<HostTier> tier = front.lock();
    bool filled = false;
    if (tier) {
      lock.unlock();
      filled = tier->fill_next();
      tier.reset();
      lock.lock();
    }
    if (!filled) {  // every part taken (or the tier gone): out of the queue, wherever it is now
      std::erase_if(filling_, [&](const std::weak_ptr<HostTier>& w) {
        return !w.owner_before(front) && !front.owner_before(w);
      });
    }
  }
}

}  // namespace epk::daemon
