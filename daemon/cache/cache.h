// The slot cache: slots of one pool keyed by (model, tensor, layout, shard), a byte budget that is never exceeded, LRU
// eviction over unpinned ready slots, pins counted per client, and release fences that must complete before a slot's
// bytes are reused. Not thread-safe: epkd calls it under its lane's lock (daemon/service/service.h); decode workers only write
// into slots that are in state kDecoding, which are never evicted.
//
// A cache hit (acquire of a ready slot, then its release) allocates nothing: the LRU list is threaded through the
// slots, and a client's pin entries (on the slot and in the per-client index) stay at count 0 after its release, so
// the next acquire by the same client finds them. Zero entries go when the slot is removed or the client is dropped.
//
// Fair shares (docs/SECURITY.md): the pinned bytes of each uid are counted over its sessions, and a capped uid (not
// root, not epkd's own) may hold at most its share of the budget pinned. Slots of up to kSmallSlotMax bytes (norms,
// biases, small shards) live in a small-slot arena at the top of the pool, each in a power-of-two range aligned to its
// size, so they cannot split the range below it that large tensors need; against a uid's share each pinned slot counts
// at least kSmallSlotMax, the arena block it can keep from others. The number of slots is bounded (max_slots), which
// bounds the metadata.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "codec/common/result.h"
#include "daemon/cache/slot_allocator.h"
#include "shm/fence.h"
#include "shm/layout.h"
#include "shm/shard.h"

namespace epk::daemon {

using ClientId = std::uint64_t;
inline constexpr ClientId kNoClient = 0;
// A client whose uid is not known to the cache (tests, prefetches): never capped.
inline constexpr uid_t kNoUid = static_cast<uid_t>(-1);
// Slots up to this size go to the small-slot arena; it is also the least a pinned slot counts against a uid's share.
inline constexpr std::uint64_t kSmallSlotMax = 64u << 10;

struct SlotKey {
  std::uint32_t model = 0;
  std::uint32_t tensor = 0;
  shm::Layout layout = shm::Layout::kStored;
  shm::ShardRange shard;  // whole, or the resolved range: each shard of a tensor is a slot of its own
  bool operator==(const SlotKey&) const = default;
};
struct SlotKeyHash {
  std::size_t operator()(const SlotKey& k) const {
    std::uint64_t h = (std::uint64_t{k.model} << 40) ^ (std::uint64_t{k.tensor} << 8) ^
                      static_cast<std::uint64_t>(k.layout);
    if (!k.shard.whole()) {  // whole-tensor keys hash as they always did
      h ^= (static_cast<std::uint64_t>(k.shard.dim) << 62) ^ (k.shard.begin * 0x9E3779B97F4A7C15ull) ^
           (k.shard.end * 0xC2B2AE3D27D4EB4Full);
    }
    return std::hash<std::uint64_t>()(h);
  }
};

enum class SlotState : std::uint8_t { kDecoding, kReady };

struct Slot {
  std::uint64_t id = 0;  // the handle clients release; never reused
  SlotKey key;
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;      // requested
  std::uint64_t footprint = 0;  // what the allocator holds: rounded(bytes), or its power of two in the arena
  bool in_arena = false;
  SlotState state = SlotState::kDecoding;
  bool prefetched = false;  // made by a prefetch and not pinned by any client since
  std::unordered_map<ClientId, std::uint32_t> pins;  // client -> pin count (0: released, entry kept for the next pin)
  // Every client's pins together. Atomic for the shared-lock path (pin_shared / unpin_shared), which moves it only
  // between values above zero; everything else changes it under the exclusive lock.
  std::atomic<std::uint32_t> pin_total{0};
  bool in_lru = false;
  Slot* lru_prev = nullptr;  // the LRU list, threaded through the slots (their map nodes do not move)
  Slot* lru_next = nullptr;
  std::vector<std::unique_ptr<shm::Fence>> fences;  // released uses not yet known to be over

  std::uint32_t pins_of(ClientId client) const {
    auto p = pins.find(client);
    return p == pins.end() ? 0 : p->second;
  }
};

// Why a request does not fit now, and whether it will without anyone's help: the bytes of unpinned slots that are
// still decoding (prefetches in flight) or whose release fences are pending (clients' kernels still reading) come
// free on their own; pinned bytes do not, and neither does a pool that pinned slots split into gaps too small.
struct SpaceReport {
  std::uint64_t request = 0;  // rounded
  std::uint64_t budget = 0;
  std::uint64_t pinned = 0;       // pinned slots (ready or decoding)
  std::uint64_t fenced = 0;       // unpinned, released behind fences still pending
  std::size_t fenced_slots = 0;
  std::uint64_t decoding = 0;     // unpinned and still decoding (prefetches)
  std::uint64_t largest_gap = 0;  // the largest range no pinned slot touches
  // Waiting can make it fit: the request fits beside the pinned slots, and fenced or decoding bytes are in the way.
  bool can_wait() const { return largest_gap >= request && fenced + decoding > 0; }
  // The refusal's numbers: what holds the budget, and why waiting would not help (or what is waited for).
  std::string describe() const;
};

// Limits (0: none), so that one client or one uid cannot take the budget from the others: the footprint of the slots
// a client (session) holds pinned (a slot counts once however often it is pinned), the pins it holds on one slot, the
// share of the budget one capped uid may hold pinned over all its sessions, and the number of slots. An acquire over
// a client's or uid's limit is refused with kQuota, naming it.
struct ClientQuota {
  std::uint64_t pinned_bytes = 0;
  std::uint32_t pins_per_slot = 0;
  double uid_share = 1.0;     // of the budget; 1: uids are not capped
  uid_t owner_uid = kNoUid;   // epkd's own uid: never capped (nor is root)
  std::uint64_t max_slots = 0;
};

// What one uid holds pinned in a pool (its share's count: at least kSmallSlotMax a slot).
struct UidPins {
  uid_t uid = kNoUid;
  std::uint64_t bytes = 0;
};

struct CacheStats {
  std::uint64_t budget_bytes = 0;
  std::uint64_t used_bytes = 0;
  std::uint64_t pinned_bytes = 0;
  std::uint64_t slots = 0;
  std::uint64_t pinned_slots = 0;
  std::uint64_t pins = 0;
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t evictions = 0;
  std::uint64_t fenced_bytes = 0;      // unpinned slots whose release fences are still pending
  std::uint64_t prefetched_bytes = 0;  // slots a prefetch made that no client has acquired yet
};

class Cache {
 public:
  // Called with (offset, rounded bytes) when an evicted slot's range goes back to the allocator (the pool discards
  // the pages).
  using DiscardFn = void (*)(void* ctx, std::uint64_t offset, std::uint64_t bytes);

  // `first_id`: the first slot id handed out (epkd gives each pool's cache its own range: the pool id in the top
  // bits, shm::kHandlePoolShift, so handles of different pools never collide).
  explicit Cache(std::uint64_t budget_bytes, DiscardFn discard = nullptr, void* discard_ctx = nullptr,
                 std::uint64_t first_id = 1);

  enum class Outcome : std::uint8_t {
    kHit,      // ready: pinned for the client, answer now
    kPending,  // being decoded: pinned for the client, answer when decoded
    kMiss,     // a new slot in kDecoding: pinned for the client (unless kNoClient); the caller starts its decode
  };
  struct Lookup {
    Outcome outcome;
    Slot* slot;
  };

  // Finds or reserves the slot for `key` (`bytes` long) and pins it for `client` (no pin for kNoClient: a prefetch).
  // A miss evicts least-recently-used unpinned ready slots whose fences have completed until the bytes fit; if they
  // cannot, ErrorCode::kNoSpace (pinned slots are never evicted). Joining a decode in flight counts as a miss.
  // `uid`: the client's (its share is checked and counted); kNoUid: uncapped.
  Result<Lookup> acquire(const SlotKey& key, std::uint64_t bytes, ClientId client, uid_t uid = kNoUid);
  // The cache-hit part of acquire() alone: the slot for `key` pinned for `client` when it is ready; null, with nothing
  // changed, when it is absent or still decoding (then acquire() decides). Never evicts or reserves, so epkd runs it
  // without the lock its misses need. Not counted in stats().hits: the caller counts these hits where no other thread
  // writes (epkd: per io thread) and adds them to its reports. client != kNoClient.
  Slot* acquire_ready(const SlotKey& key, ClientId client, uid_t uid = kNoUid);
  // The hit and the release that need no exclusive lock (daemon/cache/lane_lock.h): they run beside each other on several
  // threads (never beside any other call), each for its own client. pin_shared pins a ready slot that `client` has
  // pinned before (its entry exists) while others hold pins on it (total above zero); unpin_shared drops one of
  // `client`'s pins while others keep the total above zero. Otherwise null / false with nothing changed, and the
  // caller goes to acquire_ready / acquire / release under the exclusive lock. Hits are not counted (as
  // acquire_ready).
  Slot* pin_shared(const SlotKey& key, ClientId client);
  bool unpin_shared(std::uint64_t slot_id, ClientId client);
  // Marks a kDecoding slot ready (ok) or removes it (failed decode: its pins go with it).
  void decoded(std::uint64_t slot_id, bool ok);
  // Drops one of `client`'s pins on the slot; `fence` (null: complete now) says when the client's use is over: until
  // it completes, the slot's bytes are not reused (this slot only; other slots evict as usual). The slot's fences
  // that have completed are dropped here, so a slot released over and over holds only those still pending.
  // kNotFound if the client holds no pin on that handle (the fence is then dropped).
  Status release(std::uint64_t slot_id, ClientId client, std::unique_ptr<shm::Fence> fence);
  // Drops every pin `client` holds (its socket closed). Fences it handed back stay on their slots: its kernels may
  // still be reading (a killed process's work ends on the device, and its fences complete, after its socket closes).
  void drop_client(ClientId client);
  // A model retired at a reload: removes each of its slots that no client pins, that is ready and whose release fences
  // have completed (not counted as evictions); answers how many of its slots are left (pinned, decoding, or behind a
  // pending fence), which go once they become removable and this is called again.
  std::size_t drop_model(std::uint32_t model);
  // Fences held on slots, completed or not (tests, status).
  std::size_t fences_held() const;
  // Before the first acquire.
  void set_quota(const ClientQuota& q);
  // The footprint of the slots `client` holds pinned now.
  std::uint64_t pinned_bytes_of(ClientId client) const;
  // What `uid` holds pinned against its share now.
  std::uint64_t pinned_bytes_of_uid(uid_t uid) const;
  // The uids holding pins, most bytes first (the log line of an acquire refused for space).
  std::vector<UidPins> pin_holders() const;
  // The arena's range ([arena_base, arena_base + arena_bytes); 0 bytes: no arena, the budget is too small).
  std::uint64_t arena_base() const { return arena_.base(); }
  std::uint64_t arena_bytes() const { return arena_.capacity(); }
  // After acquire() refused `bytes` for lack of space: what holds the budget and whether waiting can help.
  SpaceReport space_report(std::uint64_t bytes) const;

  Slot* find(std::uint64_t slot_id);
  CacheStats stats() const;
  // Calls f(const Slot&) for every slot, in no particular order (status reports).
  template <class F>
  void for_each_slot(F&& f) const {
    for (const auto& [id, slot] : slots_) f(slot);
  }
  // Walks every slot: used bytes within the budget and equal to the allocator's, pin totals consistent, the LRU list
  // exactly the unpinned ready slots, no two slots overlapping.
  Status verify() const;

 private:
  // The slot of `key` when it is ready (decoded), else null; no pin, no LRU touch.
  Slot* ready_slot(const SlotKey& key);
  struct UidUsage;
  struct ClientEntry;
  struct Placement {
    std::uint64_t offset, footprint;
    bool in_arena;
  };
  // Whether `client` (of `uid`) may take one more pin on `s` (null: a new slot of `bytes`) within its quota and its
  // uid's share.
  Status check_quota(ClientId client, uid_t uid, const Slot* s, std::uint64_t bytes) const;
  bool capped(uid_t uid) const;
  // What a pin of a slot of `footprint` counts against a uid's share.
  static std::uint64_t share_charge(std::uint64_t footprint) { return std::max(footprint, kSmallSlotMax); }
  // The footprint a new slot of `bytes` will have at most (its quota check, before it is placed).
  std::uint64_t planned_footprint(std::uint64_t bytes) const;
  // A range for a new slot of `bytes`: the arena for a small one while it has room (evicting the arena's LRU slots),
  // else the main region (evicting its LRU slots); nullopt when neither has room.
  std::optional<Placement> place(std::uint64_t bytes);
  ClientEntry& entry_for(ClientId client, uid_t uid);
  void erase_entry(std::unordered_map<ClientId, ClientEntry>::iterator c);
  void pin(Slot& s, ClientId client, uid_t uid);
  void unpin_to(Slot& s, ClientId client, std::uint32_t count);
  void touch_lru(Slot& s);
  void lru_unlink(Slot& s);
  // Evicts the least recently used removable slot: of the arena (`arena` true), of the main region (false), or of
  // either (nullopt).
  bool evict_one(std::optional<bool> arena);
  void remove_slot(std::uint64_t slot_id);
  static bool fences_done(Slot& s);
  // Whether a released use of the slot may still be running (a fence not yet complete); changes nothing.
  static bool has_pending_fence(const Slot& s);

  std::uint64_t budget_;
  SlotAllocator main_;   // [0, arena_base): slots over kSmallSlotMax, and small ones when the arena is full
  SlotAllocator arena_;  // the small-slot arena, the top 1/32 of the budget (at most 64 MiB)
  DiscardFn discard_;
  void* discard_ctx_;
  std::uint64_t next_id_ = 1;
  std::unordered_map<std::uint64_t, Slot> slots_;
  std::unordered_map<SlotKey, std::uint64_t, SlotKeyHash> by_key_;
  // client -> the slots whose pins map has an entry for it (at 0 too): what drop_client() visits, and the bytes of
  // those it holds pinned (changed only when its count on a slot leaves or reaches 0). The counts live on the slots,
  // so a pin or unpin of an entry that exists and stays above 0 touches only the slot. A client's entry is changed
  // only by its own requests (one session thread) or under the exclusive lock, so the shared-lock paths may update
  // their own client's bytes.
  //
  // A uid's count is atomic: the shared-lock paths of its different sessions (different io threads) change it when a
  // client's count on a slot leaves or reaches 0. Entries are made and erased under the exclusive lock only (a
  // client's entry points at its uid's; map nodes do not move).
  struct UidUsage {
    std::atomic<std::uint64_t> pinned{0};
    std::uint32_t clients = 0;  // entries in by_client_ of this uid
    bool capped = false;
  };
  struct ClientEntry {
    std::unordered_set<std::uint64_t> slots;
    std::uint64_t pinned_bytes = 0;
    uid_t uid = kNoUid;
    UidUsage* usage = nullptr;
  };
  std::unordered_map<ClientId, ClientEntry> by_client_;
  std::unordered_map<uid_t, UidUsage> by_uid_;
  ClientQuota quota_;
  std::uint64_t uid_cap_ = 0;  // uid_share of the budget
  Slot* lru_head_ = nullptr;  // least recently used
  Slot* lru_tail_ = nullptr;
  std::size_t lru_size_ = 0;
  std::uint64_t hits_ = 0, misses_ = 0, evictions_ = 0;
};

}  // namespace epk::daemon
