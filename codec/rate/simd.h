// Lane-wise vectors for the calibrated encode's kernels (GCC/Clang vector extensions) and the AVX2 dispatch.
// Invariant: every kernel built on these does, lane by lane, the same IEEE operations in the same order as its scalar
// reference (a multiply, then a separate add: no fused multiply-add is ever enabled, and C++20 without GNU extensions
// keeps GCC from contracting), so the AVX2 build of a kernel, its baseline build and the scalar reference agree bit
// for bit. A kernel's body is an always-inline function instantiated twice: once as is and once inside an
// EPK_TARGET_AVX2 function (lambdas do not inherit a target, so the dispatch sits at the innermost loop nest).
#pragma once

#include <cstddef>

// The lane vectors never cross a call that is not inlined (every helper here is always-inline, and the dispatched
// kernels take pointers), so GCC's note that a 32-byte vector's calling convention differs without AVX does not apply.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace epk::rate::simd {

typedef float v8f __attribute__((vector_size(32)));
typedef double v4d __attribute__((vector_size(32)));

#define EPK_SIMD_INLINE [[gnu::always_inline]] inline

EPK_SIMD_INLINE v8f load8(const float* p) {
  v8f v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
EPK_SIMD_INLINE void store8(float* p, v8f v) { __builtin_memcpy(p, &v, sizeof v); }
EPK_SIMD_INLINE v4d load4(const double* p) {
  v4d v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
EPK_SIMD_INLINE void store4(double* p, v4d v) { __builtin_memcpy(p, &v, sizeof v); }

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define EPK_SIMD_DISPATCH 1
#define EPK_TARGET_AVX2 [[gnu::target("avx2")]]
#else
#define EPK_SIMD_DISPATCH 0
#endif
// True where the CPU runs AVX2 and allow_avx2 has not said false.
bool have_avx2();

// For tests: run the baseline build of every kernel (false) or the best the CPU has (true, the default).
void allow_avx2(bool allow);

}  // namespace epk::rate::simd
