#include "daemon/cache.h"

#include <algorithm>
#include <string>
#include <vector>

namespace epk::daemon {

Cache::Cache(std::uint64_t budget_bytes, DiscardFn discard, void* discard_ctx, std::uint64_t first_id)
    : budget_(budget_bytes), alloc_(budget_bytes), discard_(discard), discard_ctx_(discard_ctx), next_id_(first_id) {}

// Fences are kept in release order, and the slot is reusable only once all have completed: the walk drops the
// completed ones from the front and stops at the first still pending. A slot released again and again while its
// oldest fence is pending costs one query per release, not one per fence held (on the H200, querying every fence
// held made Cache::release 26 us on average with hundreds of markers pending; docs/NOTES.md).
bool Cache::has_pending_fence(const Slot& s) {
  return std::any_of(s.fences.begin(), s.fences.end(), [](const auto& f) { return !f->completed(); });
}

bool Cache::fences_done(Slot& s) {
  auto pending = std::find_if(s.fences.begin(), s.fences.end(),
                              [](const std::unique_ptr<shm::Fence>& f) { return !f->completed(); });
  s.fences.erase(s.fences.begin(), pending);
  return s.fences.empty();
}

void Cache::lru_unlink(Slot& s) {
  if (!s.in_lru) return;
  (s.lru_prev != nullptr ? s.lru_prev->lru_next : lru_head_) = s.lru_next;
  (s.lru_next != nullptr ? s.lru_next->lru_prev : lru_tail_) = s.lru_prev;
  s.lru_prev = s.lru_next = nullptr;
  s.in_lru = false;
  --lru_size_;
}

void Cache::touch_lru(Slot& s) {
  lru_unlink(s);
  if (s.state == SlotState::kReady && s.pin_total == 0) {
    s.lru_prev = lru_tail_;
    s.lru_next = nullptr;
    (lru_tail_ != nullptr ? lru_tail_->lru_next : lru_head_) = &s;
    lru_tail_ = &s;
    s.in_lru = true;
    ++lru_size_;
  }
}

void Cache::remove_slot(std::uint64_t slot_id) {
  auto it = slots_.find(slot_id);
  if (it == slots_.end()) return;
  Slot& s = it->second;
  lru_unlink(s);
  for (const auto& [client, n] : s.pins) {
    auto c = by_client_.find(client);
    if (c != by_client_.end()) {
      if (n > 0) c->second.pinned_bytes -= SlotAllocator::rounded(s.bytes);
      c->second.slots.erase(slot_id);
      if (c->second.slots.empty()) by_client_.erase(c);
    }
  }
  by_key_.erase(s.key);
  alloc_.free(s.offset, s.bytes);
  if (discard_ != nullptr) discard_(discard_ctx_, s.offset, SlotAllocator::rounded(s.bytes));
  slots_.erase(it);
}

bool Cache::evict_one() {
  for (Slot* s = lru_head_; s != nullptr; s = s->lru_next) {
    if (!fences_done(*s)) continue;  // a client may still read it: try the next oldest
    remove_slot(s->id);
    ++evictions_;
    return true;
  }
  return false;
}

Result<Cache::Lookup> Cache::acquire(const SlotKey& key, std::uint64_t bytes, ClientId client) {
  auto found = by_key_.find(key);
  Slot* s = nullptr;
  Outcome outcome;
  if (found != by_key_.end()) {
    s = &slots_.at(found->second);
    EPK_TRY(check_quota(client, s, s->bytes));
    outcome = s->state == SlotState::kReady ? Outcome::kHit : Outcome::kPending;
    if (client != kNoClient) ++(outcome == Outcome::kHit ? hits_ : misses_);
  } else {
    EPK_TRY(check_quota(client, nullptr, bytes));
    if (SlotAllocator::rounded(bytes) > budget_) {
      return make_error(ErrorCode::kNoSpace, "no space: " + std::to_string(bytes) +
                                                 " bytes exceed the whole budget of " + std::to_string(budget_));
    }
    std::optional<std::uint64_t> offset = alloc_.allocate(bytes);
    while (!offset && evict_one()) offset = alloc_.allocate(bytes);
    if (!offset) return make_error(ErrorCode::kNoSpace, space_report(bytes).describe());
    // The one place bytes are added: the budget holds by construction of the allocator, checked again here.
    if (alloc_.used() > budget_) return make_error(ErrorCode::kInternal, "cache: budget exceeded (bug)");
    const std::uint64_t id = next_id_++;
    auto [it, inserted] = slots_.try_emplace(id);  // built in place: a Slot does not move (its atomic pin total)
    s = &it->second;
    s->id = id;
    s->key = key;
    s->offset = *offset;
    s->bytes = bytes;
    s->state = SlotState::kDecoding;
    s->prefetched = client == kNoClient;
    by_key_.emplace(key, s->id);
    outcome = Outcome::kMiss;
    if (client != kNoClient) ++misses_;
  }
  if (client != kNoClient) pin(*s, client);
  touch_lru(*s);
  return Lookup{outcome, s};
}

Slot* Cache::ready_slot(const SlotKey& key) {
  auto found = by_key_.find(key);
  if (found == by_key_.end()) return nullptr;
  auto it = slots_.find(found->second);
  return it == slots_.end() || it->second.state != SlotState::kReady ? nullptr : &it->second;
}

Status Cache::check_quota(ClientId client, const Slot* s, std::uint64_t bytes) const {
  if (client == kNoClient || (quota_.pins_per_slot == 0 && quota_.pinned_bytes == 0)) return {};
  const std::uint32_t mine = s != nullptr ? s->pins_of(client) : 0;
  if (quota_.pins_per_slot != 0 && mine >= quota_.pins_per_slot) {
    return make_error(ErrorCode::kQuota, "quota: this client already holds " + std::to_string(mine) +
                                             " pins on this tensor (max_pins_per_tensor = " +
                                             std::to_string(quota_.pins_per_slot) + ")");
  }
  if (quota_.pinned_bytes != 0 && mine == 0) {
    const std::uint64_t held = pinned_bytes_of(client);
    if (held + SlotAllocator::rounded(bytes) > quota_.pinned_bytes) {
      return make_error(ErrorCode::kQuota, "quota: this client holds " + std::to_string(held) + " pinned bytes, and " +
                                               std::to_string(SlotAllocator::rounded(bytes)) +
                                               " more would pass its quota of " +
                                               std::to_string(quota_.pinned_bytes) + " (quota_pinned_mb)");
    }
  }
  return {};
}

std::uint64_t Cache::pinned_bytes_of(ClientId client) const {
  auto c = by_client_.find(client);
  return c == by_client_.end() ? 0 : c->second.pinned_bytes;
}

Slot* Cache::acquire_ready(const SlotKey& key, ClientId client) {
  Slot* ready = ready_slot(key);
  if (ready == nullptr || !check_quota(client, ready, ready->bytes)) return nullptr;  // acquire() answers the quota
  Slot& s = *ready;
  pin(s, client);
  touch_lru(s);
  return &s;
}

Slot* Cache::pin_shared(const SlotKey& key, ClientId client) {
  Slot* ready = ready_slot(key);
  if (ready == nullptr) return nullptr;
  Slot& s = *ready;
  auto p = s.pins.find(client);
  if (p == s.pins.end()) return nullptr;  // a first pin adds entries: exclusive
  if (quota_.pins_per_slot != 0 && p->second >= quota_.pins_per_slot) return nullptr;  // acquire() refuses it
  // A pin after this client's release of the slot adds its bytes to the client's own entry (see by_client_).
  ClientEntry* mine = nullptr;
  if (p->second == 0) {
    auto c = by_client_.find(client);
    if (c == by_client_.end()) return nullptr;
    if (quota_.pinned_bytes != 0 &&
        c->second.pinned_bytes + SlotAllocator::rounded(s.bytes) > quota_.pinned_bytes) {
      return nullptr;  // acquire() refuses it
    }
    mine = &c->second;
  }
  // Only from a total above zero: from zero the slot leaves the LRU list, which shared holders never touch.
  std::uint32_t total = s.pin_total.load(std::memory_order_relaxed);
  do {
    if (total == 0) return nullptr;
  } while (!s.pin_total.compare_exchange_weak(total, total + 1, std::memory_order_relaxed));
  ++p->second;  // this client's own entry: no other thread writes it while shared holders run
  if (mine != nullptr) mine->pinned_bytes += SlotAllocator::rounded(s.bytes);
  return &s;
}

bool Cache::unpin_shared(std::uint64_t slot_id, ClientId client) {
  auto it = slots_.find(slot_id);
  if (it == slots_.end()) return false;
  Slot& s = it->second;
  auto p = s.pins.find(client);
  if (p == s.pins.end() || p->second == 0) return false;  // not pinned by this client: release() answers the error
  ClientEntry* mine = nullptr;
  if (p->second == 1) {  // its last pin here: the slot's bytes leave the client's own entry
    auto c = by_client_.find(client);
    if (c == by_client_.end()) return false;
    mine = &c->second;
  }
  // Only to a total above zero: at zero the slot joins the LRU list.
  std::uint32_t total = s.pin_total.load(std::memory_order_relaxed);
  do {
    if (total <= 1) return false;
  } while (!s.pin_total.compare_exchange_weak(total, total - 1, std::memory_order_relaxed));
  --p->second;
  if (mine != nullptr) mine->pinned_bytes -= SlotAllocator::rounded(s.bytes);
  return true;
}

// Entries are created on a client's first pin of a slot and then kept at 0 (unpin_to): later pins allocate nothing.
void Cache::pin(Slot& s, ClientId client) {
  s.prefetched = false;
  auto [p, fresh] = s.pins.try_emplace(client, 0);
  if (fresh || p->second == 0) {
    ClientEntry& e = by_client_[client];
    if (fresh) e.slots.insert(s.id);
    e.pinned_bytes += SlotAllocator::rounded(s.bytes);
  }
  ++p->second;
  ++s.pin_total;
}

void Cache::decoded(std::uint64_t slot_id, bool ok) {
  auto it = slots_.find(slot_id);
  if (it == slots_.end() || it->second.state != SlotState::kDecoding) return;
  if (!ok) {
    remove_slot(slot_id);
    return;
  }
  it->second.state = SlotState::kReady;
  touch_lru(it->second);
}

// Entries that reach 0 stay (on the slot and in by_client_): the same client's next acquire of this slot, the cache
// hit that repeats all day, then finds them and allocates nothing.
void Cache::unpin_to(Slot& s, ClientId client, std::uint32_t count) {
  auto p = s.pins.find(client);
  if (p == s.pins.end()) return;
  count = std::min(count, p->second);
  if (count != 0 && count == p->second) by_client_[client].pinned_bytes -= SlotAllocator::rounded(s.bytes);
  p->second -= count;
  s.pin_total -= count;
  touch_lru(s);
}

Status Cache::release(std::uint64_t slot_id, ClientId client, std::unique_ptr<shm::Fence> fence) {
  auto it = slots_.find(slot_id);
  if (it == slots_.end() || it->second.pins_of(client) == 0) {
    return make_error(ErrorCode::kNotFound,
                      "release: handle " + std::to_string(slot_id) + " is not pinned by this client");
  }
  Slot& s = it->second;
  if (!s.fences.empty()) fences_done(s);
  if (fence != nullptr && !fence->completed()) s.fences.push_back(std::move(fence));
  unpin_to(s, client, 1);
  return {};
}

void Cache::drop_client(ClientId client) {
  auto c = by_client_.find(client);
  if (c == by_client_.end()) return;
  for (const std::uint64_t slot_id : c->second.slots) {
    auto it = slots_.find(slot_id);
    if (it == slots_.end()) continue;
    Slot& s = it->second;
    auto p = s.pins.find(client);
    if (p == s.pins.end()) continue;
    s.pin_total -= p->second;
    s.pins.erase(p);
    touch_lru(s);
  }
  by_client_.erase(c);
}

std::size_t Cache::drop_model(std::uint32_t model) {
  std::vector<std::uint64_t> removable;
  std::size_t left = 0;
  for (auto& [id, s] : slots_) {
    if (s.key.model != model) continue;
    if (s.pin_total == 0 && s.state == SlotState::kReady && fences_done(s)) {
      removable.push_back(id);
    } else {
      ++left;
    }
  }
  for (const std::uint64_t id : removable) remove_slot(id);
  return left;
}

std::size_t Cache::fences_held() const {
  std::size_t n = 0;
  for (const auto& [id, s] : slots_) n += s.fences.size();
  return n;
}

SpaceReport Cache::space_report(std::uint64_t bytes) const {
  SpaceReport r;
  r.request = SlotAllocator::rounded(bytes);
  r.budget = budget_;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> pinned;  // [begin, end) of pinned slots
  for (const auto& [id, s] : slots_) {
    const std::uint64_t held = SlotAllocator::rounded(s.bytes);
    if (s.pin_total > 0) {
      r.pinned += held;
      pinned.emplace_back(s.offset, s.offset + held);
    } else if (s.state == SlotState::kDecoding) {
      r.decoding += held;
    } else if (has_pending_fence(s)) {
      r.fenced += held;
      ++r.fenced_slots;
    }
  }
  std::sort(pinned.begin(), pinned.end());
  std::uint64_t at = 0;
  for (const auto& [begin, end] : pinned) {
    if (begin > at) r.largest_gap = std::max(r.largest_gap, begin - at);
    at = std::max(at, end);
  }
  if (budget_ > at) r.largest_gap = std::max(r.largest_gap, budget_ - at);
  return r;
}

std::string SpaceReport::describe() const {
  std::string s = "no space: " + std::to_string(request) + " bytes in a budget of " + std::to_string(budget) + ": " +
                  std::to_string(pinned) + " pinned, " + std::to_string(fenced) + " released behind " +
                  std::to_string(fenced_slots) + " pending fence(s), " + std::to_string(decoding) +
                  " decoding for prefetches";
  if (pinned + request > budget) return s + "; the pinned bytes plus the request exceed the budget";
  if (largest_gap < request) {
    return s + "; the pinned slots leave no free range that large (the largest is " + std::to_string(largest_gap) +
           " bytes)";
  }
  return s;
}

Slot* Cache::find(std::uint64_t slot_id) {
  auto it = slots_.find(slot_id);
  return it == slots_.end() ? nullptr : &it->second;
}

CacheStats Cache::stats() const {
  CacheStats st;
  st.budget_bytes = budget_;
  st.used_bytes = alloc_.used();
  st.slots = slots_.size();
  for (const auto& [id, s] : slots_) {
    if (s.pin_total > 0) {
      ++st.pinned_slots;
      st.pinned_bytes += SlotAllocator::rounded(s.bytes);
      st.pins += s.pin_total;
    } else if (has_pending_fence(s)) {
      st.fenced_bytes += SlotAllocator::rounded(s.bytes);
    }
    if (s.prefetched) st.prefetched_bytes += SlotAllocator::rounded(s.bytes);
  }
  st.hits = hits_;
  st.misses = misses_;
  st.evictions = evictions_;
  return st;
}

Status Cache::verify() const {
  auto bad = [](const std::string& why) { return make_error(ErrorCode::kInternal, "cache invariant: " + why); };
  EPK_TRY(alloc_.verify());
  if (alloc_.used() > budget_)
    return bad("used " + std::to_string(alloc_.used()) + " > budget " + std::to_string(budget_));
  std::uint64_t sum = 0;
  std::size_t lru_expected = 0;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (const auto& [id, s] : slots_) {
    sum += SlotAllocator::rounded(s.bytes);
    ranges.emplace_back(s.offset, s.offset + SlotAllocator::rounded(s.bytes));
    std::uint32_t total = 0;
    for (const auto& [client, n] : s.pins) {
      auto c = by_client_.find(client);
      if (c == by_client_.end() || c->second.slots.count(id) == 0) {
        return bad("per-client pin index misses slot " + std::to_string(id));
      }
      total += n;
    }
    if (total != s.pin_total) return bad("pin total of slot " + std::to_string(id));
    bool should_be_in_lru = s.state == SlotState::kReady && s.pin_total == 0;
    if (should_be_in_lru != s.in_lru) return bad("LRU membership of slot " + std::to_string(id));
    if (s.in_lru) ++lru_expected;
    auto k = by_key_.find(s.key);
    if (k == by_key_.end() || k->second != id) return bad("key index of slot " + std::to_string(id));
  }
  if (sum != alloc_.used()) return bad("slot bytes " + std::to_string(sum) + " != allocator used");
  std::size_t walked = 0;
  for (const Slot* p = lru_head_; p != nullptr; p = p->lru_next) {
    if (!p->in_lru || ++walked > lru_expected) return bad("LRU list holds a slot it should not");
    if ((p->lru_prev == nullptr) != (p == lru_head_) || (p->lru_next == nullptr) != (p == lru_tail_)) {
      return bad("LRU list links of slot " + std::to_string(p->id));
    }
  }
  if (walked != lru_expected || lru_size_ != lru_expected) return bad("LRU list length");
  if (by_key_.size() != slots_.size()) return bad("key index size");
  for (const auto& [client, entry] : by_client_) {
    std::uint64_t pinned = 0;
    for (const std::uint64_t id : entry.slots) {
      auto it = slots_.find(id);
      if (it == slots_.end() || it->second.pins.count(client) == 0) {
        return bad("per-client pin index names slot " + std::to_string(id) + " without a pin entry there");
      }
      if (it->second.pins.at(client) > 0) pinned += SlotAllocator::rounded(it->second.bytes);
    }
    if (pinned != entry.pinned_bytes) return bad("pinned bytes of client " + std::to_string(client));
  }
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) return bad("overlapping slots");
  }
  return {};
}

}  // namespace epk::daemon
