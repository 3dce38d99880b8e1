// Decode status words shared by epkd and its clients (docs/PROTOCOL.md): epkd answers an uncached device acquire
// as soon as the decode is enqueued, before the stream has finished it, so the reply cannot say whether the kernel
// found a corrupt tile. It carries a ticket instead; the client's wait() reads the ticket's word here once the decode
// is over and refuses the tensor if it failed.
//
// The table is a memfd of `entries` 64-bit words, sent once per client after the pool fds of the hello reply; epkd
// seals it once mapped (no resize, no new writable mapping), and clients map it read-only. The
// word of ticket t is entries[t % entries] = (t << 2) | state. epkd writes kPending when it issues the work (before
// the reply goes out) and kOk or kFailed once the stream has synchronised and the kernel's status was read (before
// the slot is marked ready, so a later cache-hit reply, which carries no ticket, always names a checked decode).
// Waiters sleep on the word's low 32 bits (a shared futex: the memfd is MAP_SHARED in both processes); epkd wakes
// them after each final write. A word that holds a later ticket means the entry was reused `entries` decodes later:
// the status is lost and wait() says so (the caller must not trust the bytes).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

#include "codec/common/result.h"
#include "shm/unique_fd.h"

namespace epk::shm {

inline constexpr std::uint32_t kStatusEntries = 65536;     // epkd's table (512 KiB)
inline constexpr std::uint32_t kMaxStatusEntries = 1u << 20;  // the most a hello reply may announce
inline constexpr std::uint64_t kNoTicket = 0;              // acquire reply: the decode was checked before the reply

enum class DecodeState : std::uint32_t { kPending = 0, kOk = 1, kFailed = 2, kLost = 3 };
const char* decode_state_name(DecodeState s);

// epkd's side: owns the memfd and its mapping. begin() and finish() may be called from any thread.
class StatusTable {
 public:
  static Result<StatusTable> create(std::uint32_t entries = kStatusEntries);

  StatusTable() = default;

  int fd() const { return fd_.get(); }
  std::uint32_t entries() const { return entries_; }
  bool valid() const { return map_.data() != nullptr; }

  // A fresh ticket (never kNoTicket) whose word now reads kPending.
  std::uint64_t begin();
  // The ticket's final state (ok: kOk, else kFailed); wakes the waiters. No effect when a later ticket has taken the
  // entry since (its waiter then reads kLost).
  void finish(std::uint64_t ticket, bool ok);

 private:
  std::uint64_t* words() const { return reinterpret_cast<std::uint64_t*>(map_.data()); }

  UniqueFd fd_;
  Mapping map_;
  std::uint32_t entries_ = 0;
  std::unique_ptr<std::atomic<std::uint64_t>> next_;  // the last ticket handed out (heap-held: the table moves)
};

// A client's view of epkd's table.
class StatusView {
 public:
  // Maps the table epkd sent (`entries` words; the fd's size is checked against it).
  static Result<StatusView> map(UniqueFd fd, std::uint32_t entries);

  StatusView() = default;
  bool valid() const { return map_.data() != nullptr; }
  std::uint32_t entries() const { return entries_; }

  // The ticket's state now (kPending while the decode runs).
  DecodeState peek(std::uint64_t ticket) const;
  // Polls for up to spin_us, then sleeps on the word until the ticket's state is final or timeout_ms has passed
  // (0: no limit; then kIo). Returns kOk, kFailed or kLost. The sleep is woken by StatusTable::finish and re-checks
  // the word at least every `slice` (a bound on the rare ABA of the word's low half; tests stretch it).
  Result<DecodeState> wait(std::uint64_t ticket, int spin_us, int timeout_ms,
                           std::chrono::milliseconds slice = std::chrono::milliseconds(10)) const;

 private:
  // The mapping is read-only (the table is sealed): only loads and FUTEX_WAIT go through this pointer. It is not
  // const because std::atomic_ref (before C++26) takes a non-const reference.
  std::uint64_t* words() const { return reinterpret_cast<std::uint64_t*>(map_.data()); }

  Mapping map_;
  std::uint32_t entries_ = 0;
};

}  // namespace epk::shm
