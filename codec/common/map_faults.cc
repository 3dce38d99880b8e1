#include "codec/common/map_faults.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

namespace epk::map_faults {
namespace {

constexpr int kSlots = 8192;

struct WatchSlot {
  std::atomic<std::uintptr_t> begin{0};
  std::atomic<std::uintptr_t> end{0};  // 0: free
  std::atomic<bool> damaged{false};
};

WatchSlot g_slots[kSlots];
std::atomic<std::uintptr_t> g_page{4096};

// Async-signal-safe: atomics, the raw mmap system call and sigaction only.
void on_sigbus(int sig, siginfo_t* info, void*) {
  const auto addr = reinterpret_cast<std::uintptr_t>(info->si_addr);
  const std::uintptr_t page = g_page.load(std::memory_order_relaxed);
  for (WatchSlot& s : g_slots) {
    const std::uintptr_t end = s.end.load(std::memory_order_acquire);
    if (end == 0 || addr < s.begin.load(std::memory_order_relaxed) || addr >= end) continue;
    const std::uintptr_t at = addr & ~(page - 1);
    const long r = ::syscall(SYS_mmap, at, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (r != -1) {
      s.damaged.store(true, std::memory_order_release);
      return;  // the faulting read retries on the zero page
    }
    break;
  }
  // Not a watched mapping: the default action, at the retried instruction.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  ::sigaction(sig, &dfl, nullptr);
}

}  // namespace

void install_map_fault_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_page.store(static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE)), std::memory_order_relaxed);
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, nullptr);
  });
}

int watch(const void* data, std::size_t size) {
  if (data == nullptr || size == 0) return kNoWatch;
  const auto begin = reinterpret_cast<std::uintptr_t>(data);
  for (int i = 0; i < kSlots; ++i) {
    WatchSlot& s = g_slots[i];
    std::uintptr_t free = 0;
    // Claim the slot with a placeholder end, then publish the range (the handler reads end last-written-first).
    if (!s.end.compare_exchange_strong(free, 1, std::memory_order_acq_rel)) continue;
    s.damaged.store(false, std::memory_order_relaxed);
    s.begin.store(begin, std::memory_order_relaxed);
    s.end.store(begin + size, std::memory_order_release);
    return i;
  }
  return kNoWatch;
}

void unwatch(int id) {
  if (id < 0 || id >= kSlots) return;
  g_slots[id].end.store(0, std::memory_order_release);
}

bool damaged(int id) { return id >= 0 && id < kSlots && g_slots[id].damaged.load(std::memory_order_acquire); }

}  // namespace epk::map_faults
