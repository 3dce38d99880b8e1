// shm/host_tier.h: epkd's host tier is a memfd no process can change once sealed, and a client maps only such a one.
#include "shm/host_tier.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

namespace epk::shm {
namespace {

HostTierMemory filled_and_sealed(std::uint64_t bytes) {
  auto m = HostTierMemory::create(bytes, "host-tier-test");
  EXPECT_TRUE(m) << m.error().to_string();
  std::span<std::byte> w = m->writable();
  EXPECT_EQ(w.size(), bytes);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = std::byte(i * 7 + 1);
  EXPECT_TRUE(m->seal());
  return std::move(*m);
}

UniqueFd dup_of(int fd) { return UniqueFd(::fcntl(fd, F_DUPFD_CLOEXEC, 0)); }

TEST(HostTier, SealedItKeepsItsBytesAndRefusesEveryWrite) {
  const std::uint64_t n = 3 * 4096 + 17;  // not a whole page
  HostTierMemory m = filled_and_sealed(n);
  EXPECT_TRUE(m.sealed());
  EXPECT_TRUE(m.writable().empty());
  ASSERT_EQ(m.bytes().size(), n);
  EXPECT_EQ(m.bytes()[n - 1], std::byte((n - 1) * 7 + 1));
  // Through any fd: no write, no resize, no writable shared map, no seal removed.
  const char x = 'x';
  EXPECT_EQ(::pwrite(m.fd(), &x, 1, 0), -1);
  EXPECT_EQ(::ftruncate(m.fd(), 0), -1);
  EXPECT_EQ(::ftruncate(m.fd(), static_cast<off_t>(2 * n)), -1);
  void* w = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, m.fd(), 0);
  EXPECT_EQ(w, MAP_FAILED);
  if (w != MAP_FAILED) ::munmap(w, n);
  EXPECT_EQ(::fcntl(m.fd(), F_ADD_SEALS, F_SEAL_SEAL), -1);
  // The read-only view cannot be made writable.
  EXPECT_NE(::mprotect(const_cast<std::byte*>(m.bytes().data()), n, PROT_READ | PROT_WRITE), 0);
  EXPECT_EQ(m.bytes()[0], std::byte(1));
}

TEST(HostTier, ItsReadOnlyViewShowsWhatIsWrittenAndStaysPutAcrossTheSeal) {
  // epkd decodes the parts of a host tier already filled while other parts are written: the read-only view exists
  // from the start, shows each write at once, and keeps its address when the read-write mapping goes.
  const std::uint64_t n = 2 * 4096 + 5;
  auto m = HostTierMemory::create(n, "host-tier-test");
  ASSERT_TRUE(m) << m.error().to_string();
  const std::byte* view = m->bytes().data();
  ASSERT_EQ(m->bytes().size(), n);
  EXPECT_EQ(m->bytes()[4096], std::byte(0));
  m->writable()[4096] = std::byte(0x5a);
  EXPECT_EQ(view[4096], std::byte(0x5a));
  ASSERT_TRUE(m->seal()) << m->seal().error().to_string();
  EXPECT_TRUE(m->writable().empty());
  EXPECT_EQ(m->bytes().data(), view);
  EXPECT_EQ(view[4096], std::byte(0x5a));
  EXPECT_EQ(view[n - 1], std::byte(0));
  EXPECT_EQ(::fcntl(m->fd(), F_GET_SEALS) & F_SEAL_WRITE, F_SEAL_WRITE);
  // The view is the shared one again: it cannot be made writable, and it shows the file itself.
  EXPECT_NE(::mprotect(const_cast<std::byte*>(view), n, PROT_READ | PROT_WRITE), 0);
  char b = 0;
  ASSERT_EQ(::pread(m->fd(), &b, 1, 4096), 1);
  EXPECT_EQ(b, 0x5a);
}

TEST(HostTier, AClientMapsTheSameBytesReadOnly) {
  const std::uint64_t n = 8192;
  HostTierMemory m = filled_and_sealed(n);
  auto c = HostTierMemory::map(dup_of(m.fd()), n, "model 'm'");
  ASSERT_TRUE(c) << c.error().to_string();
  ASSERT_EQ(c->size(), n);
  EXPECT_EQ(std::memcmp(c->bytes().data(), m.bytes().data(), n), 0);
  EXPECT_NE(::mprotect(const_cast<std::byte*>(c->bytes().data()), n, PROT_READ | PROT_WRITE), 0);
}

TEST(HostTier, AClientRefusesAnUnsealedMemfdOrAnotherSize) {
  HostTierMemory m = filled_and_sealed(4096);
  for (std::uint64_t wrong : {0ull, 4095ull, 4097ull}) {
    auto c = HostTierMemory::map(dup_of(m.fd()), wrong, "model 'm'");
    ASSERT_FALSE(c) << wrong;
    EXPECT_EQ(c.error().code, ErrorCode::kBadInput);
    EXPECT_NE(c.error().message.find("model 'm'"), std::string::npos) << c.error().message;
  }
  // Before seal() (epkd could still write it), and a memfd with only some of the seals.
  auto open = HostTierMemory::create(4096, "unsealed");
  ASSERT_TRUE(open);
  auto c = HostTierMemory::map(dup_of(open->fd()), 4096, "model 'm'");
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("not a sealed memfd"), std::string::npos) << c.error().message;
  UniqueFd partial(::memfd_create("partial", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  ASSERT_TRUE(partial.valid());
  ASSERT_EQ(::ftruncate(partial.get(), 4096), 0);
  ASSERT_EQ(::fcntl(partial.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  EXPECT_FALSE(HostTierMemory::map(std::move(partial), 4096, "model 'm'"));
  // Not a memfd at all.
  UniqueFd file(::open("/proc/self/exe", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(file.valid());
  EXPECT_FALSE(HostTierMemory::map(std::move(file), 4096, "model 'm'"));
}

TEST(HostTier, SizeZeroIsRefused) { EXPECT_FALSE(HostTierMemory::create(0, "empty")); }

// A memfd of any size is made at once (its pages come as written): a tier the host cannot hold is refused by name
// before a byte is filled. 1 PiB: more than any host this runs on has.
TEST(HostTier, MoreThanTheHostHasIsRefused) {
  auto m = HostTierMemory::create(std::uint64_t{1} << 50, "too-large");
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().code, ErrorCode::kNoSpace);
  EXPECT_NE(m.error().message.find("MemAvailable"), std::string::npos) << m.error().message;
}

}  // namespace
}  // namespace epk::shm
