// The lock of one epkd lane (its cache). Exclusive holders (misses, decodes done, client ends, stats) change the
// cache's structure; shared holders, one reader slot per io thread, only move pin counts between values above zero
// (Cache::pin_shared / unpin_shared), which they do with atomics on the slot and on their own client's entry. A shared
// lock writes only its own slot's cache line and reads a flag that changes only when an exclusive holder comes, so
// cache hits on different io threads neither wait for each other nor pass a lock's line between cores (one lock
// shared by every io thread limits cache-hit round trips at 16 clients: docs/measurements/cache-hit-round-trips.md).
//
// Rules: reader slot r is used by one thread at a time (io thread r); a thread never asks for the exclusive lock while
// it holds a shared one. Exclusive holders are serialised by a SpinMutex; a reader that meets one backs off until it
// has gone. Meets Lockable for the exclusive side.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>

#include "daemon/cache/spin_mutex.h"

namespace epk::daemon {

class LaneLock {
 public:
  explicit LaneLock(std::size_t readers) : readers_(std::make_unique<Reader[]>(readers)), reader_count_(readers) {}
  LaneLock(const LaneLock&) = delete;
  LaneLock& operator=(const LaneLock&) = delete;

  std::size_t readers() const { return reader_count_; }

  void lock() {
    writers_.lock();
    // seq_cst on both sides (this store then the readers' loads; their store then this load): a reader that missed
    // the flag is seen here, and one that sees it steps back.
    writer_.store(true, std::memory_order_seq_cst);
    for (std::size_t r = 0; r < reader_count_; ++r) {
      for (int spins = 0; readers_[r].held.load(std::memory_order_seq_cst) != 0; ++spins) pause(spins);
    }
  }

  void unlock() {
    writer_.store(false, std::memory_order_release);
    writers_.unlock();
  }

  void lock_shared(std::size_t reader) {
    std::atomic<std::uint32_t>& held = readers_[reader].held;
    for (;;) {
      held.store(1, std::memory_order_seq_cst);
      if (!writer_.load(std::memory_order_seq_cst)) return;
      held.store(0, std::memory_order_release);
      for (int spins = 0; writer_.load(std::memory_order_acquire); ++spins) pause(spins);
    }
  }

  void unlock_shared(std::size_t reader) { readers_[reader].held.store(0, std::memory_order_release); }

 private:
  // Exclusive sections and shared ones are short: spin, and yield the core to whoever holds it if that takes long
  // (a preempted holder on a busy machine).
  static void pause(int spins) {
    if (spins < 1024) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else {
      std::this_thread::yield();
    }
  }

  struct alignas(64) Reader {
    std::atomic<std::uint32_t> held{0};
  };
  alignas(64) std::atomic<bool> writer_{false};
  alignas(64) SpinMutex writers_;
  std::unique_ptr<Reader[]> readers_;
  std::size_t reader_count_;
};

// std::lock_guard for the shared side.
class SharedLaneGuard {
 public:
  SharedLaneGuard(LaneLock& lock, std::size_t reader) : lock_(lock), reader_(reader) { lock_.lock_shared(reader_); }
  ~SharedLaneGuard() { lock_.unlock_shared(reader_); }
  SharedLaneGuard(const SharedLaneGuard&) = delete;
  SharedLaneGuard& operator=(const SharedLaneGuard&) = delete;

 private:
  LaneLock& lock_;
  std::size_t reader_;
};

}  // namespace epk::daemon
