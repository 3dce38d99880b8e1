// A lock for short critical sections shared by many io threads (the cache-hit path's lane lock): a waiter spins a
// while before it sleeps, where std::mutex (glibc) sleeps in the kernel at the first contention and its unlock then
// pays a futex wake and the waiter a scheduler wake-up, tens of microseconds on a busy machine, for a section that
// lasts a fraction of one. Three states (0 free, 1 held, 2 held with sleepers): an unlock makes a system call only
// when someone sleeps. Meets Lockable (std::unique_lock, std::lock_guard).
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace epk::daemon {

class SpinMutex {
 public:
  // Spins before sleeping: a few microseconds on current x86 cores (pause is 10 to 140 cycles), longer than the
  // sections it guards, shorter than a sleep and wake-up.
  static constexpr int kSpins = 256;

  SpinMutex() = default;
  SpinMutex(const SpinMutex&) = delete;
  SpinMutex& operator=(const SpinMutex&) = delete;

  bool try_lock() {
    std::int32_t expected = 0;
    return state_.compare_exchange_strong(expected, 1, std::memory_order_acquire, std::memory_order_relaxed);
  }

  void lock() {
    for (int i = 0; i < kSpins; ++i) {
      // Read before the exchange: waiters spin on a shared copy of the line instead of stealing it from the owner.
      if (state_.load(std::memory_order_relaxed) == 0 && try_lock()) return;
      relax();
    }
    // Sleep until woken, marking the lock contended so that its unlock wakes someone.
    while (state_.exchange(2, std::memory_order_acquire) != 0) futex(FUTEX_WAIT_PRIVATE, 2);
  }

  void unlock() {
    if (state_.exchange(0, std::memory_order_release) == 2) futex(FUTEX_WAKE_PRIVATE, 1);
  }

 private:
  static void relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield" ::: "memory");
#endif
  }

  void futex(int op, std::int32_t value) {
    // std::atomic<int32_t> is a plain int32_t in memory on Linux (lock-free, same size): the futex word.
    ::syscall(SYS_futex, reinterpret_cast<std::int32_t*>(&state_), op, value, nullptr, nullptr, 0);
  }

  static_assert(std::atomic<std::int32_t>::is_always_lock_free);
  std::atomic<std::int32_t> state_{0};
};

}  // namespace epk::daemon
