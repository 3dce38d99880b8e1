// Device pools (CUDA VMM exported as POSIX fds): created here, imported in another process (this binary re-executed,
// since CUDA does not survive fork), both sides reading what the other wrote. Skips without a GPU.
#include "shm/device_pool.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace epk::shm {
namespace {

constexpr std::uint64_t kOffsetA = (1u << 20) + 4096;  // written by the creator
constexpr std::uint64_t kOffsetB = (2u << 20) + 8192;  // written by the importer
constexpr std::size_t kLen = 12345;

std::vector<std::uint8_t> pattern(std::uint8_t seed) {
  std::vector<std::uint8_t> v(kLen);
  for (std::size_t i = 0; i < kLen; ++i) v[i] = static_cast<std::uint8_t>(seed + i * 31 + (i >> 8));
  return v;
}

TEST(DevicePool, CreateRoundsUpToTheGranularityAndExportsAnFd) {
  if (!cuda_device_available(0)) GTEST_SKIP() << "no CUDA device";
  auto p = DevicePool::create(0, (3u << 20) + 1);
  ASSERT_TRUE(p) << p.error().to_string();
  EXPECT_EQ((*p)->kind(), PoolKind::kDevice);
  EXPECT_EQ((*p)->device(), 0);
  EXPECT_GE((*p)->size(), (3u << 20) + 1);
  EXPECT_EQ((*p)->size() % (2u << 20), 0u);  // 2 MiB granularity on current GPUs
  EXPECT_GE((*p)->export_fd(), 0);
  EXPECT_TRUE((*p)->device_ptr());
  EXPECT_TRUE((*p)->host_span(0, 16).empty());
}

TEST(DevicePool, ImportedInAnotherProcessBothSidesSeeTheSameMemory) {
  if (!cuda_device_available(0)) GTEST_SKIP() << "no CUDA device";
  auto p = DevicePool::create(0, 4u << 20);
  ASSERT_TRUE(p) << p.error().to_string();
  auto a = pattern(7);
  ASSERT_TRUE(copy_to_device((*p)->device_ptr() + kOffsetA, a.data(), kLen, 0));
  const int fd = (*p)->export_fd();
  ASSERT_EQ(::fcntl(fd, F_SETFD, 0), 0);  // inherited across exec by the importer
  std::string env_fd = "EPK_DEVICE_POOL_FD=" + std::to_string(fd);
  std::string env_size = "EPK_DEVICE_POOL_SIZE=" + std::to_string((*p)->size());
  pid_t pid = ::fork();
  if (pid == 0) {
    ::putenv(env_fd.data());
    ::putenv(env_size.data());
    ::execl("/proc/self/exe", "device_pool_test", "--gtest_filter=DevicePoolImporter.*", nullptr);
    ::_exit(127);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << "the importing process failed (its output is above)";
  std::vector<std::uint8_t> b(kLen);
  ASSERT_TRUE(copy_from_device(b.data(), (*p)->device_ptr() + kOffsetB, kLen, 0));
  EXPECT_EQ(b, pattern(99));
}

// Runs only in the process started by the test above.
TEST(DevicePoolImporter, ReadsTheCreatorsBytesAndWritesItsOwn) {
  const char* fd_s = std::getenv("EPK_DEVICE_POOL_FD");
  const char* size_s = std::getenv("EPK_DEVICE_POOL_SIZE");
  if (fd_s == nullptr || size_s == nullptr) GTEST_SKIP() << "only in the importing process";
  auto m = import_device_pool(UniqueFd(std::atoi(fd_s)), std::strtoull(size_s, nullptr, 10), 0);
  ASSERT_TRUE(m) << m.error().to_string();
  std::vector<std::uint8_t> a(kLen);
  ASSERT_TRUE(copy_from_device(a.data(), m->device_ptr() + kOffsetA, kLen, 0));
  EXPECT_EQ(a, pattern(7));
  auto b = pattern(99);
  ASSERT_TRUE(copy_to_device(m->device_ptr() + kOffsetB, b.data(), kLen, 0));
}

TEST(DevicePool, ImportOfAnFdThatIsNoPoolIsAnError) {
  if (!cuda_device_available(0)) GTEST_SKIP() << "no CUDA device";
  auto m = import_device_pool(UniqueFd(::open("/dev/null", O_RDONLY | O_CLOEXEC)), 2u << 20, 0);
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().code, ErrorCode::kCuda);
}

TEST(DevicePool, MappingLargerThanTheAllocationIsAnError) {
  if (!cuda_device_available(0)) GTEST_SKIP() << "no CUDA device";
  auto p = DevicePool::create(0, 2u << 20);
  ASSERT_TRUE(p) << p.error().to_string();
  int dup = ::fcntl((*p)->export_fd(), F_DUPFD_CLOEXEC, 0);
  auto m = import_device_pool(UniqueFd(dup), (*p)->size() * 4, 0);
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().code, ErrorCode::kCuda);
}

}  // namespace
}  // namespace epk::shm
