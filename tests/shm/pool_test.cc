#include "shm/pool.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>

#include "shm/fd_passing.h"

namespace epk::shm {
namespace {

TEST(HostPool, ExportedFdMapsTheSameMemory) {
  auto pool = HostPool::create("test-pool", 3 * 4096 + 100);
  ASSERT_TRUE(pool) << pool.error().to_string();
  auto span = (*pool)->host_span(4096, 8);
  ASSERT_EQ(span.size(), 8u);
  std::memcpy(span.data(), "epkpool!", 8);
  auto imported = ImportedPool::import_host(UniqueFd(::dup((*pool)->export_fd())), (*pool)->size());
  ASSERT_TRUE(imported) << imported.error().to_string();
  EXPECT_EQ(std::memcmp(imported->data() + 4096, "epkpool!", 8), 0);
  (*pool)->host_span(5000, 1)[0] = 0x5A;  // epkd's mapping still writes after the seal, and clients see it
  EXPECT_EQ(imported->data()[5000], 0x5A);
}

// Everything a holder of the exported fd could try in order to resize the pool or change what other clients read.
TEST(HostPool, TheExportedFdCannotResizeWriteOrMapWritable) {
  const std::uint64_t size = 4 * 4096;
  auto pool = HostPool::create("test-pool", size);
  ASSERT_TRUE(pool) << pool.error().to_string();
  auto span = (*pool)->host_span(0, size);
  std::memset(span.data(), 0x11, size);
  const int fd = (*pool)->export_fd();
  EXPECT_NE(::ftruncate(fd, 0), 0);
  EXPECT_NE(::ftruncate(fd, static_cast<off_t>(2 * size)), 0);
  const std::uint8_t byte = 0x22;
  EXPECT_NE(::pwrite(fd, &byte, 1, 0), 1);
  EXPECT_NE(::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096), 0);
  EXPECT_EQ(::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), MAP_FAILED);
  // A read-only shared mapping cannot be made writable afterwards either.
  void* ro = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(ro, MAP_FAILED);
  EXPECT_NE(::mprotect(ro, size, PROT_READ | PROT_WRITE), 0);
  ::munmap(ro, size);
  // Nor can the seals be loosened or a seal added that would stop epkd's own writes.
  EXPECT_NE(::fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), 0);
  EXPECT_NE(::fcntl(fd, F_GET_SEALS) & F_SEAL_SEAL, 0);
  // A reopened description of the same memfd is bound by the same seals.
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  UniqueFd reopened(::open(link.c_str(), O_RDWR | O_CLOEXEC));
  if (reopened.valid()) {
    EXPECT_NE(::pwrite(reopened.get(), &byte, 1, 0), 1);
    EXPECT_EQ(::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, reopened.get(), 0), MAP_FAILED);
  }
  for (std::uint64_t i = 0; i < size; ++i) ASSERT_EQ(span[i], 0x11) << i;
  span[7] = 0x33;  // epkd's own mapping still writes
  EXPECT_EQ(span[7], 0x33);
}

TEST(HostPool, OutOfRangeSpansAreEmpty) {
  auto pool = HostPool::create("test-pool", 4 * 4096);
  ASSERT_TRUE(pool);
  EXPECT_TRUE((*pool)->host_span(4 * 4096, 1).empty());
  EXPECT_TRUE((*pool)->host_span(1, ~0ull).empty());
}

TEST(HostPool, ZeroSizeIsRefused) { EXPECT_FALSE(HostPool::create("x", 0)); }

TEST(ImportedPool, AnnouncedSizeLargerThanTheFdIsRefused) {
  auto pool = HostPool::create("test-pool", 4096);
  ASSERT_TRUE(pool);
  auto imported = ImportedPool::import_host(UniqueFd(::dup((*pool)->export_fd())), 8192);
  ASSERT_FALSE(imported);
  EXPECT_EQ(imported.error().code, ErrorCode::kBadInput);
}

TEST(FdPassing, FdsArriveWithTheBytes) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  UniqueFd a(sv[0]), b(sv[1]);
  auto pool = HostPool::create("test-pool", 4096);
  ASSERT_TRUE(pool);
  (*pool)->host_span(0, 1)[0] = 42;
  int fds[2] = {(*pool)->export_fd(), (*pool)->export_fd()};
  const std::uint8_t msg[5] = {1, 2, 3, 4, 5};
  ASSERT_TRUE(send_with_fds(a.get(), msg, fds, 1000));
  std::uint8_t buf[16];
  std::vector<UniqueFd> got;
  auto n = recv_with_fds(b.get(), buf, &got);
  ASSERT_TRUE(n) << n.error().to_string();
  EXPECT_EQ(*n, 5u);
  ASSERT_EQ(got.size(), 2u);
  auto imported = ImportedPool::import_host(std::move(got[1]), 4096);
  ASSERT_TRUE(imported);
  EXPECT_EQ(imported->data()[0], 42);
}

TEST(FdPassing, TooManyFdsAreRefusedBeforeSending) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  UniqueFd a(sv[0]), b(sv[1]);
  std::vector<int> fds(kMaxPassedFds + 1, 0);
  const std::uint8_t msg[1] = {0};
  EXPECT_FALSE(send_with_fds(a.get(), msg, fds, 100));
}

TEST(UniqueFd, MoveAssignmentClosesTheOldFd) {
  int p1[2], p2[2];
  ASSERT_EQ(::pipe(p1), 0);
  ASSERT_EQ(::pipe(p2), 0);
  ::close(p1[1]);
  ::close(p2[1]);
  UniqueFd a(p1[0]);
  UniqueFd b(p2[0]);
  a = std::move(b);
  EXPECT_EQ(a.get(), p2[0]);
  EXPECT_FALSE(b.valid());
  EXPECT_EQ(::fcntl(p1[0], F_GETFD), -1);  // the old one was closed
}

TEST(Mapping, MoveAssignmentUnmapsTheOld) {
  auto pool = HostPool::create("test-pool", 4096);
  ASSERT_TRUE(pool);
  auto m1 = Mapping::map_shared_readonly((*pool)->export_fd(), 4096, "m1");
  auto m2 = Mapping::map_shared_readonly((*pool)->export_fd(), 4096, "m2");
  ASSERT_TRUE(m1 && m2);
  std::uint8_t* p2 = m2->data();
  *m1 = std::move(*m2);
  EXPECT_EQ(m1->data(), p2);
  EXPECT_EQ(m2->data(), nullptr);
  EXPECT_FALSE(Mapping::map_shared_readonly((*pool)->export_fd(), 0, "empty"));
}

}  // namespace
}  // namespace epk::shm
