// The decode status table of protocol version 4 (shm/decode_status.h): epkd's side writes pending / ok / failed per
// ticket, a client's view (another mapping of the same memfd, in this process or a forked one) reads and waits.
#include "shm/decode_status.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

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

}  // namespace
}  // namespace epk::shm
