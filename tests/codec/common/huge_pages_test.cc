// advise_huge_pages marks exactly the whole 2 MiB pages inside a range (the kernel's VmFlags "hg" in
// /proc/self/smaps), nothing around them, and nothing for a range holding no whole huge page. Skips where the kernel
// has no transparent huge pages (madvise refuses MADV_HUGEPAGE).
#include "codec/common/huge_pages.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

namespace epk {
namespace {

constexpr std::uintptr_t kHuge = std::uintptr_t{2} << 20;

// Whether the mapping that holds `p` carries MADV_HUGEPAGE ("hg" among its VmFlags).
bool advised(std::uintptr_t p) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    std::uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> begin >> dash >> end && dash == '-') {
      inside = begin <= p && p < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return (line + " ").find(" hg ") != std::string::npos;
    }
  }
  return false;
}

class HugePagesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // 8 MiB starting on a 2 MiB boundary, inside a larger reservation.
    raw_ = ::mmap(nullptr, kSize + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(raw_, MAP_FAILED);
    base_ = (reinterpret_cast<std::uintptr_t>(raw_) + kHuge - 1) / kHuge * kHuge;
    if (::madvise(reinterpret_cast<void*>(base_), kHuge, MADV_HUGEPAGE) != 0) GTEST_SKIP() << "no THP here";
    ASSERT_EQ(::madvise(reinterpret_cast<void*>(base_), kHuge, MADV_NOHUGEPAGE), 0);
    ASSERT_FALSE(advised(base_));
  }
  void TearDown() override {
    if (raw_ != MAP_FAILED && raw_ != nullptr) ::munmap(raw_, kSize + kHuge);
  }
  static constexpr std::uintptr_t kSize = 8 * (std::uintptr_t{1} << 20);
  void* raw_ = nullptr;
  std::uintptr_t base_ = 0;
};

TEST_F(HugePagesTest, AdvisesTheWholeHugePagesInsideTheRangeOnly) {
  // [base + 12 KiB, base + 6 MiB + 12 KiB) holds the whole huge pages [base + 2 MiB, base + 6 MiB).
  advise_huge_pages(reinterpret_cast<void*>(base_ + 12288), 6 * (std::uintptr_t{1} << 20));
  EXPECT_FALSE(advised(base_));
  EXPECT_FALSE(advised(base_ + kHuge - 4096));
  EXPECT_TRUE(advised(base_ + kHuge));
  EXPECT_TRUE(advised(base_ + 3 * kHuge - 1));
  EXPECT_FALSE(advised(base_ + 3 * kHuge));
  EXPECT_FALSE(advised(base_ + kSize - 4096));
}

TEST_F(HugePagesTest, ARangeWithoutAWholeHugePageIsLeftAlone) {
  advise_huge_pages(reinterpret_cast<void*>(base_ + 4096), kHuge);  // straddles one boundary, holds no whole page
  for (std::uintptr_t at = base_; at < base_ + kSize; at += kHuge / 2) EXPECT_FALSE(advised(at)) << at - base_;
}

}  // namespace
}  // namespace epk
