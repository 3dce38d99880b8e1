// The decode status table of protocol version 4 (shm/decode_status.h): epkd's side writes pending / ok / failed per
// ticket, a client's view (another mapping of the same memfd, in this process or a forked one) reads and waits.
#include "shm/decode_status.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include <chrono>
#include <thread>

namespace epk::shm {
namespace {

StatusView view_of(const StatusTable& t, std::uint32_t entries) {
  auto v = StatusView::map(UniqueFd(::dup(t.fd())), entries);
  EXPECT_TRUE(v) << v.error().to_string();
  return v ? std::move(*v) : StatusView();
}

TEST(DecodeStatus, TicketsAreFreshAndReadPendingUntilFinished) {
  auto t = StatusTable::create(7);  // odd: tickets wrap at a non-power of two
  ASSERT_TRUE(t) << t.error().to_string();
  StatusView v = view_of(*t, 7);
  ASSERT_TRUE(v.valid());
  const std::uint64_t a = t->begin(), b = t->begin();
  EXPECT_NE(a, kNoTicket);
  EXPECT_GT(b, a);
  EXPECT_EQ(v.peek(a), DecodeState::kPending);
  EXPECT_EQ(v.peek(b), DecodeState::kPending);
  t->finish(a, true);
  t->finish(b, false);
  EXPECT_EQ(v.peek(a), DecodeState::kOk);
  EXPECT_EQ(v.peek(b), DecodeState::kFailed);
  auto w = v.wait(b, 0, 1000);
  ASSERT_TRUE(w);
  EXPECT_EQ(*w, DecodeState::kFailed);
}

TEST(DecodeStatus, ATicketNotYetIssuedReadsPending) {
  auto t = StatusTable::create(16);
  ASSERT_TRUE(t);
  StatusView v = view_of(*t, 16);
  const std::uint64_t a = t->begin();
  t->finish(a, true);
  EXPECT_EQ(v.peek(a + 16), DecodeState::kPending);  // same entry, an older ticket in it
}

TEST(DecodeStatus, AReusedEntryReadsLostAndALateFinishDoesNotClobberIt) {
  auto t = StatusTable::create(4);
  ASSERT_TRUE(t);
  StatusView v = view_of(*t, 4);
  const std::uint64_t first = t->begin();
  std::uint64_t later = 0;
  for (int i = 0; i < 4; ++i) later = t->begin();  // the fourth lands on first's entry
  ASSERT_EQ(later % 4, first % 4);
  EXPECT_EQ(v.peek(first), DecodeState::kLost);
  t->finish(first, false);  // too late: the entry is later's now
  EXPECT_EQ(v.peek(later), DecodeState::kPending);
  auto w = v.wait(first, 0, 1000);
  ASSERT_TRUE(w);
  EXPECT_EQ(*w, DecodeState::kLost);
}

TEST(DecodeStatus, WaitTimesOutOnAPendingTicket) {
  auto t = StatusTable::create(8);
  ASSERT_TRUE(t);
  StatusView v = view_of(*t, 8);
  const std::uint64_t a = t->begin();
  const auto t0 = std::chrono::steady_clock::now();
  auto w = v.wait(a, 5, 30);
  EXPECT_FALSE(w);
  EXPECT_EQ(w.error().code, ErrorCode::kIo);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(30));
}

// The waiter sleeps (no spin) in another process; the finish in this one wakes it with the final state.
TEST(DecodeStatus, ASleepingWaiterInAnotherProcessIsWoken) {
  auto t = StatusTable::create(64);
  ASSERT_TRUE(t);
  const std::uint64_t a = t->begin();
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto v = StatusView::map(UniqueFd(::dup(t->fd())), 64);
    if (!v) ::_exit(10);
    const auto t0 = std::chrono::steady_clock::now();
    // A 20 s slice: only the futex wake of finish() (at about 60 ms) ends the sleep well before it.
    auto w = v->wait(a, 0, 30000, std::chrono::milliseconds(20000));
    if (!w) ::_exit(11);
    const auto waited = std::chrono::steady_clock::now() - t0;
    if (waited < std::chrono::milliseconds(40)) ::_exit(12);   // it did wait
    if (waited > std::chrono::milliseconds(5000)) ::_exit(13);  // it was not woken: the slice ran out
    ::_exit(static_cast<int>(*w));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  t->finish(a, false);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), static_cast<int>(DecodeState::kFailed));
}

TEST(DecodeStatus, BadTableSizesAreRefused) {
  EXPECT_FALSE(StatusTable::create(0));
  EXPECT_FALSE(StatusTable::create(kMaxStatusEntries + 1));
  auto t = StatusTable::create(8);
  ASSERT_TRUE(t);
  for (std::uint32_t n : {0u, 16u, kMaxStatusEntries + 1}) {  // 16: more than the fd holds
    auto v = StatusView::map(UniqueFd(::dup(t->fd())), n);
    ASSERT_FALSE(v) << n;
    EXPECT_EQ(v.error().code, ErrorCode::kBadInput);
  }
}

// Only epkd writes the table: the fd a client receives maps read-only and cannot be written, resized or re-sealed,
// while epkd's own mapping still publishes to the client's view. The unsealed memfd below shows that the writable
// mapping and the write are refused by the seals, not by the fd.
TEST(DecodeStatus, AClientCannotWriteOrResizeTheTable) {
  auto t = StatusTable::create(8);
  ASSERT_TRUE(t) << t.error().to_string();
  const std::size_t bytes = 8 * sizeof(std::uint64_t);
  UniqueFd client_fd(::dup(t->fd()));
  ASSERT_GE(client_fd.get(), 0);
  errno = 0;
  void* w = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, client_fd.get(), 0);
  EXPECT_EQ(w, MAP_FAILED);
  EXPECT_EQ(errno, EPERM);
  if (w != MAP_FAILED) ::munmap(w, bytes);
  const std::uint64_t forged = (1u << 2) | 1u;  // "ticket 1 ok"
  EXPECT_EQ(::pwrite(client_fd.get(), &forged, sizeof(forged), 0), -1);
  EXPECT_EQ(::ftruncate(client_fd.get(), 0), -1);
  EXPECT_EQ(::fcntl(client_fd.get(), F_ADD_SEALS, 0), -1);  // F_SEAL_SEAL: the seals stay
  const int seals = ::fcntl(client_fd.get(), F_GET_SEALS);
  EXPECT_EQ(seals & (F_SEAL_FUTURE_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
            F_SEAL_FUTURE_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  auto v = StatusView::map(std::move(client_fd), 8);
  ASSERT_TRUE(v) << v.error().to_string();
  const std::uint64_t a = t->begin();
  t->finish(a, true);
  EXPECT_EQ(v->peek(a), DecodeState::kOk);

  // The same writes succeed on an unsealed memfd: what refuses them above is the seal, not the fd.
  UniqueFd plain(::memfd_create("plain", MFD_CLOEXEC));
  ASSERT_GE(plain.get(), 0);
  ASSERT_EQ(::ftruncate(plain.get(), static_cast<off_t>(bytes)), 0);
  void* pw = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, plain.get(), 0);
  EXPECT_NE(pw, MAP_FAILED);
  if (pw != MAP_FAILED) ::munmap(pw, bytes);
  EXPECT_EQ(::pwrite(plain.get(), &forged, sizeof(forged), 0), static_cast<ssize_t>(sizeof(forged)));
}

}  // namespace
}  // namespace epk::shm
