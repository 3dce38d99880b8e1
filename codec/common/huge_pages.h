// A hint that large fresh host memory be faulted in 2 MiB pages where the kernel gives them (transparent huge pages
// on request, "madvise" mode): zero-filling a fresh 4 KiB page at a time is what a large std::vector's first resize
// costs, and huge pages take a fraction of the faults. Without THP nothing changes.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>

namespace epk {

// Advises the whole 2 MiB pages inside [p, p + bytes); memory outside them (a heap's neighbours) is not touched.
inline void advise_huge_pages(void* p, std::size_t bytes) {
  constexpr std::uintptr_t kHuge = std::uintptr_t{2} << 20;
  const auto b = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t begin = (b + kHuge - 1) / kHuge * kHuge, end = (b + bytes) / kHuge * kHuge;
  if (end > begin) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

}  // namespace epk
