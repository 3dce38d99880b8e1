#include "daemon/cache/cache.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace epk::daemon {

namespace {

constexpr std::uint64_t kMaxArenaBytes = 64ull << 20;
constexpr std::uint64_t kMinArenaBlocks = 4;

// The arena: the top 1/32 of the budget in whole kSmallSlotMax blocks (at most kMaxArenaBytes), none when that is
// under kMinArenaBlocks blocks. Its base is a multiple of kSmallSlotMax, so a power-of-two range aligned to its size
// never straddles two blocks.
std::uint64_t arena_base_for(std::uint64_t budget) {
  const std::uint64_t size = std::min(budget / 32 / kSmallSlotMax * kSmallSlotMax, kMaxArenaBytes);
  if (size < kMinArenaBlocks * kSmallSlotMax) return budget;
  return (budget - size) / kSmallSlotMax * kSmallSlotMax;
}

std::uint64_t pow2_at_least(std::uint64_t n) {
  std::uint64_t p = kSlotAlignment;
  while (p < n) p <<= 1;
  return p;
}

}  // namespace

Cache::Cache(std::uint64_t budget_bytes, DiscardFn discard, void* discard_ctx, std::uint64_t first_id)
    : budget_(budget_bytes),
      main_(arena_base_for(budget_bytes)),
      arena_(std::min(budget_bytes - arena_base_for(budget_bytes), kMaxArenaBytes), arena_base_for(budget_bytes)),
      discard_(discard),
      discard_ctx_(discard_ctx),
      next_id_(first_id) {}

void Cache::set_quota(const ClientQuota& q) {
  quota_ = q;
  uid_cap_ = q.uid_share >= 1.0 ? budget_ : std::uint64_t(std::max(0.0, q.uid_share) * double(budget_));
}

bool Cache::capped(uid_t uid) const {
  return quota_.uid_share < 1.0 && uid != kNoUid && uid != 0 && uid != quota_.owner_uid;
}

std::uint64_t Cache::planned_footprint(std::uint64_t bytes) const {
  if (bytes <= kSmallSlotMax && arena_.capacity() > 0) return pow2_at_least(bytes);
  return SlotAllocator::rounded(bytes);
}

std::optional<Cache::Placement> Cache::place(std::uint64_t bytes) {
  if (bytes <= kSmallSlotMax && arena_.capacity() > 0) {
    const std::uint64_t fp = pow2_at_least(bytes);
    do {
      if (auto off = arena_.allocate(fp, fp)) return Placement{*off, fp, true};
    } while (evict_one(true));
  }
  // A large slot, or a small one while every arena slot is pinned or behind a pending fence.
  const std::uint64_t fp = SlotAllocator::rounded(bytes);
  do {
    if (auto off = main_.allocate(fp)) return Placement{*off, fp, false};
  } while (evict_one(false));
  return std::nullopt;
}

Cache::ClientEntry& Cache::entry_for(ClientId client, uid_t uid) {
  auto [c, fresh] = by_client_.try_emplace(client);
  if (fresh) {
    c->second.uid = uid;
    UidUsage& u = by_uid_[uid];
    ++u.clients;
    u.capped = capped(uid);
    c->second.usage = &u;
  }
  return c->second;
}

void Cache::erase_entry(std::unordered_map<ClientId, ClientEntry>::iterator c) {
  auto u = by_uid_.find(c->second.uid);
  if (u != by_uid_.end() && --u->second.clients == 0) by_uid_.erase(u);
  by_client_.erase(c);
}

std::uint64_t Cache::pinned_bytes_of_uid(uid_t uid) const {
  auto u = by_uid_.find(uid);
  return u == by_uid_.end() ? 0 : u->second.pinned.load(std::memory_order_relaxed);
}

std::vector<UidPins> Cache::pin_holders() const {
  std::vector<UidPins> out;
  for (const auto& [uid, u] : by_uid_) {
    const std::uint64_t b = u.pinned.load(std::memory_order_relaxed);
    if (b > 0) out.push_back({uid, b});
  }
  std::sort(out.begin(), out.end(), [](const UidPins& a, const UidPins& b) { return a.bytes > b.bytes; });
  return out;
}

// Fences are kept in release order, and the slot is reusable only once all have completed: the walk drops the
// completed ones from the front and stops at the first still pending. A slot released again and again while its
// oldest fence is pending costs one query per release, not one per fence held (querying every fence held made
// Cache::release slow with hundreds of markers pending: docs/measurements/acquire-latency.md).
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
      if (n > 0) {
        c->second.pinned_bytes -= s.footprint;
        c->second.usage->pinned -= share_charge(s.footprint);
      }
      c->second.slots.erase(slot_id);
      if (c->second.slots.empty()) erase_entry(c);
    }
  }
  by_key_.erase(s.key);
  (s.in_arena ? arena_ : main_).free(s.offset, s.footprint);
  if (discard_ != nullptr) discard_(discard_ctx_, s.offset, s.footprint);
  slots_.erase(it);
}

bool Cache::evict_one(std::optional<bool> arena) {
  for (Slot* s = lru_head_; s != nullptr; s = s->lru_next) {
    if (arena && s->in_arena != *arena) continue;  // its range would not help this region
    if (!fences_done(*s)) continue;  // a client may still read it: try the next oldest
    remove_slot(s->id);
    ++evictions_;
    return true;
  }
  return false;
}

Result<Cache::Lookup> Cache::acquire(const SlotKey& key, std::uint64_t bytes, ClientId client, uid_t uid) {
  auto found = by_key_.find(key);
  Slot* s = nullptr;
  Outcome outcome;
  if (found != by_key_.end()) {
    s = &slots_.at(found->second);
    EPK_TRY(check_quota(client, uid, s, s->bytes));
    outcome = s->state == SlotState::kReady ? Outcome::kHit : Outcome::kPending;
    if (client != kNoClient) ++(outcome == Outcome::kHit ? hits_ : misses_);
  } else {
    EPK_TRY(check_quota(client, uid, nullptr, bytes));
    if (SlotAllocator::rounded(bytes) > main_.capacity() && bytes > kSmallSlotMax) {
      return make_error(ErrorCode::kNoSpace, "no space: " + std::to_string(bytes) +
                                                 " bytes exceed the pool's range for large tensors, " +
                                                 std::to_string(main_.capacity()) + " bytes of a budget of " +
                                                 std::to_string(budget_));
    }
    // The slot count bounds the cache's metadata: at the limit a new slot replaces the least recently used one.
    if (quota_.max_slots != 0 && slots_.size() >= quota_.max_slots && !evict_one(std::nullopt)) {
      return make_error(ErrorCode::kNoSpace, "no space: the pool holds " + std::to_string(slots_.size()) +
                                                 " slots, the most it keeps (max_slots_per_pool = " +
                                                 std::to_string(quota_.max_slots) +
                                                 "), and none of them can be evicted");
    }
    const std::optional<Placement> at = place(bytes);
    if (!at) return make_error(ErrorCode::kNoSpace, space_report(bytes).describe());
    // The one place bytes are added: the budget holds by construction of the allocators, checked again here.
    if (main_.used() + arena_.used() > budget_) return make_error(ErrorCode::kInternal, "cache: budget exceeded (bug)");
    const std::uint64_t id = next_id_++;
    auto [it, inserted] = slots_.try_emplace(id);  // built in place: a Slot does not move (its atomic pin total)
    s = &it->second;
    s->id = id;
    s->key = key;
    s->offset = at->offset;
    s->bytes = bytes;
    s->footprint = at->footprint;
    s->in_arena = at->in_arena;
    s->state = SlotState::kDecoding;
    s->prefetched = client == kNoClient;
    by_key_.emplace(key, s->id);
    outcome = Outcome::kMiss;
    if (client != kNoClient) ++misses_;
  }
  if (client != kNoClient) pin(*s, client, uid);
  touch_lru(*s);
  return Lookup{outcome, s};
}

Slot* Cache::ready_slot(const SlotKey& key) {
  auto found = by_key_.find(key);
  if (found == by_key_.end()) return nullptr;
  auto it = slots_.find(found->second);
  return it == slots_.end() || it->second.state != SlotState::kReady ? nullptr : &it->second;
}

Status Cache::check_quota(ClientId client, uid_t uid, const Slot* s, std::uint64_t bytes) const {
  if (client == kNoClient) return {};
  const std::uint32_t mine = s != nullptr ? s->pins_of(client) : 0;
  if (quota_.pins_per_slot != 0 && mine >= quota_.pins_per_slot) {
    return make_error(ErrorCode::kQuota, "quota: this client already holds " + std::to_string(mine) +
                                             " pins on this tensor (max_pins_per_tensor = " +
                                             std::to_string(quota_.pins_per_slot) + ")");
  }
  if (mine != 0) return {};
  const std::uint64_t fp = s != nullptr ? s->footprint : planned_footprint(bytes);
  if (quota_.pinned_bytes != 0) {
    const std::uint64_t held = pinned_bytes_of(client);
    if (held + fp > quota_.pinned_bytes) {
      return make_error(ErrorCode::kQuota, "quota: this client holds " + std::to_string(held) + " pinned bytes, and " +
                                               std::to_string(fp) + " more would pass its quota of " +
                                               std::to_string(quota_.pinned_bytes) + " (quota_pinned_mb)");
    }
  }
  // The uid of an existing client entry is the one it was made with (a session's uid does not change).
  auto c = by_client_.find(client);
  const uid_t who = c != by_client_.end() ? c->second.uid : uid;
  if (capped(who)) {
    const std::uint64_t held = pinned_bytes_of_uid(who);
    if (held + share_charge(fp) > uid_cap_) {
      return make_error(ErrorCode::kQuota, "quota: uid " + std::to_string(who) + " holds " + std::to_string(held) +
                                               " pinned bytes in this pool, and " + std::to_string(share_charge(fp)) +
                                               " more would pass its share of " + std::to_string(uid_cap_) +
                                               " (uid_pinned_percent = " +
                                               std::to_string(std::lround(quota_.uid_share * 100)) + ")");
    }
  }
  return {};
}

std::uint64_t Cache::pinned_bytes_of(ClientId client) const {
  auto c = by_client_.find(client);
  return c == by_client_.end() ? 0 : c->second.pinned_bytes;
}

Slot* Cache::acquire_ready(const SlotKey& key, ClientId client, uid_t uid) {
  Slot* ready = ready_slot(key);
  if (ready == nullptr || !check_quota(client, uid, ready, ready->bytes)) return nullptr;  // acquire() answers it
  Slot& s = *ready;
  pin(s, client, uid);
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
  // An unpinned slot is the exclusive path's (below): seen here first, it costs no write to a shared counter (a
  // lone client's hit, released in between, is that case every time).
  if (s.pin_total.load(std::memory_order_relaxed) == 0) return nullptr;
  // A pin after this client's release of the slot adds its bytes to the client's own entry (see by_client_) and
  // its share charge to its uid's count, which other sessions of the uid move at the same time: the charge is
  // reserved within the share first, and given back if the pin does not happen.
  ClientEntry* mine = nullptr;
  const std::uint64_t charge = share_charge(s.footprint);
  if (p->second == 0) {
    auto c = by_client_.find(client);
    if (c == by_client_.end()) return nullptr;
    if (quota_.pinned_bytes != 0 && c->second.pinned_bytes + s.footprint > quota_.pinned_bytes) {
      return nullptr;  // acquire() refuses it
    }
    mine = &c->second;
    std::atomic<std::uint64_t>& held = mine->usage->pinned;
    if (mine->usage->capped) {
      std::uint64_t h = held.load(std::memory_order_relaxed);
      do {
        if (h + charge > uid_cap_) return nullptr;  // acquire() refuses it
      } while (!held.compare_exchange_weak(h, h + charge, std::memory_order_relaxed));
    } else {
      held.fetch_add(charge, std::memory_order_relaxed);
    }
  }
  // Only from a total above zero: from zero the slot leaves the LRU list, which shared holders never touch.
  std::uint32_t total = s.pin_total.load(std::memory_order_relaxed);
  do {
    if (total == 0) {
      if (mine != nullptr) mine->usage->pinned.fetch_sub(charge, std::memory_order_relaxed);
      return nullptr;
    }
  } while (!s.pin_total.compare_exchange_weak(total, total + 1, std::memory_order_relaxed));
  ++p->second;  // this client's own entry: no other thread writes it while shared holders run
  if (mine != nullptr) mine->pinned_bytes += s.footprint;
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
  if (mine != nullptr) {
    mine->pinned_bytes -= s.footprint;
    mine->usage->pinned.fetch_sub(share_charge(s.footprint), std::memory_order_relaxed);
  }
  return true;
}

// Entries are created on a client's first pin of a slot and then kept at 0 (unpin_to): later pins allocate nothing.
void Cache::pin(Slot& s, ClientId client, uid_t uid) {
  s.prefetched = false;
  auto [p, fresh] = s.pins.try_emplace(client, 0);
  if (fresh || p->second == 0) {
    ClientEntry& e = entry_for(client, uid);
    if (fresh) e.slots.insert(s.id);
    e.pinned_bytes += s.footprint;
    e.usage->pinned += share_charge(s.footprint);
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
  if (count != 0 && count == p->second) {
    auto c = by_client_.find(client);
    if (c != by_client_.end()) {
      c->second.pinned_bytes -= s.footprint;
      c->second.usage->pinned -= share_charge(s.footprint);
    }
  }
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
    if (p->second > 0) c->second.usage->pinned -= share_charge(s.footprint);
    s.pin_total -= p->second;
    s.pins.erase(p);
    touch_lru(s);
  }
  erase_entry(c);
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
  // [begin, end) of pinned slots, per region: a request takes a range of one region.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> pinned, pinned_arena;
  for (const auto& [id, s] : slots_) {
    const std::uint64_t held = s.footprint;
    if (s.pin_total > 0) {
      r.pinned += held;
      (s.in_arena ? pinned_arena : pinned).emplace_back(s.offset, s.offset + held);
    } else if (s.state == SlotState::kDecoding) {
      r.decoding += held;
    } else if (has_pending_fence(s)) {
      r.fenced += held;
      ++r.fenced_slots;
    }
  }
  auto largest_gap = [](std::vector<std::pair<std::uint64_t, std::uint64_t>>& ranges, std::uint64_t begin_at,
                        std::uint64_t end_at) {
    std::sort(ranges.begin(), ranges.end());
    std::uint64_t gap = 0, at = begin_at;
    for (const auto& [begin, end] : ranges) {
      if (begin > at) gap = std::max(gap, begin - at);
      at = std::max(at, end);
    }
    return end_at > at ? std::max(gap, end_at - at) : gap;
  };
  r.largest_gap = largest_gap(pinned, main_.base(), main_.base() + main_.capacity());
  if (bytes <= kSmallSlotMax && arena_.capacity() > 0) {
    r.largest_gap = std::max(r.largest_gap, largest_gap(pinned_arena, arena_.base(), arena_.base() + arena_.capacity()));
  }
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
  st.used_bytes = main_.used() + arena_.used();
  st.slots = slots_.size();
  for (const auto& [id, s] : slots_) {
    if (s.pin_total > 0) {
      ++st.pinned_slots;
      st.pinned_bytes += s.footprint;
      st.pins += s.pin_total;
    } else if (has_pending_fence(s)) {
      st.fenced_bytes += s.footprint;
    }
    if (s.prefetched) st.prefetched_bytes += s.footprint;
  }
  st.hits = hits_;
  st.misses = misses_;
  st.evictions = evictions_;
  return st;
}

Status Cache::verify() const {
  auto bad = [](const std::string& why) { return make_error(ErrorCode::kInternal, "cache invariant: " + why); };
  EPK_TRY(main_.verify());
  EPK_TRY(arena_.verify());
  const std::uint64_t used = main_.used() + arena_.used();
  if (used > budget_) return bad("used " + std::to_string(used) + " > budget " + std::to_string(budget_));
  if (arena_.capacity() > 0 && (main_.base() + main_.capacity() > arena_.base() ||
                                arena_.base() + arena_.capacity() > budget_)) {
    return bad("regions overlap or pass the budget");
  }
  std::uint64_t sum_main = 0, sum_arena = 0;
  std::size_t lru_expected = 0;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (const auto& [id, s] : slots_) {
    (s.in_arena ? sum_arena : sum_main) += s.footprint;
    if (!(s.in_arena ? arena_ : main_).contains(s.offset)) return bad("slot " + std::to_string(id) + " outside its region");
    if (s.footprint < SlotAllocator::rounded(s.bytes)) return bad("footprint of slot " + std::to_string(id));
    if (s.in_arena && (s.footprint & (s.footprint - 1)) != 0) return bad("arena slot " + std::to_string(id) + " not a power of two");
    if (s.in_arena && s.offset % s.footprint != 0) return bad("arena slot " + std::to_string(id) + " misaligned");
    ranges.emplace_back(s.offset, s.offset + s.footprint);
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
  if (sum_main != main_.used() || sum_arena != arena_.used()) return bad("slot bytes != allocator used");
  std::size_t walked = 0;
  for (const Slot* p = lru_head_; p != nullptr; p = p->lru_next) {
    if (!p->in_lru || ++walked > lru_expected) return bad("LRU list holds a slot it should not");
    if ((p->lru_prev == nullptr) != (p == lru_head_) || (p->lru_next == nullptr) != (p == lru_tail_)) {
      return bad("LRU list links of slot " + std::to_string(p->id));
    }
  }
  if (walked != lru_expected || lru_size_ != lru_expected) return bad("LRU list length");
  if (by_key_.size() != slots_.size()) return bad("key index size");
  std::unordered_map<uid_t, std::pair<std::uint64_t, std::uint32_t>> by_uid;  // charge, clients
  for (const auto& [client, entry] : by_client_) {
    std::uint64_t pinned = 0;
    for (const std::uint64_t id : entry.slots) {
      auto it = slots_.find(id);
      if (it == slots_.end() || it->second.pins.count(client) == 0) {
        return bad("per-client pin index names slot " + std::to_string(id) + " without a pin entry there");
      }
      if (it->second.pins.at(client) > 0) {
        pinned += it->second.footprint;
        by_uid[entry.uid].first += share_charge(it->second.footprint);
      }
    }
    ++by_uid[entry.uid].second;
    if (pinned != entry.pinned_bytes) return bad("pinned bytes of client " + std::to_string(client));
    auto u = by_uid_.find(entry.uid);
    if (u == by_uid_.end() || &u->second != entry.usage) return bad("uid entry of client " + std::to_string(client));
  }
  if (by_uid.size() != by_uid_.size()) return bad("uid index size");
  for (const auto& [uid, u] : by_uid_) {
    auto e = by_uid.find(uid);
    if (e == by_uid.end() || e->second.first != u.pinned.load() || e->second.second != u.clients) {
      return bad("pinned bytes of uid " + std::to_string(uid));
    }
  }
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) return bad("overlapping slots");
  }
  return {};
}

}  // namespace epk::daemon
