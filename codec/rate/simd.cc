#include "codec/rate/simd.h"

#include <atomic>

namespace epk::rate::simd {
namespace {
std::atomic<bool> g_allow{true};
}  // namespace

bool have_avx2() {
#if EPK_SIMD_DISPATCH
  static const bool cpu = __builtin_cpu_supports("avx2");
  return cpu && g_allow.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

void allow_avx2(bool allow) { g_allow.store(allow, std::memory_order_relaxed); }

}  // namespace epk::rate::simd
