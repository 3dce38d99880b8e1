// 1000 clients SIGKILLed in turn leak nothing: the real epkd, client processes that connect, pin tensors and are
// killed in batches while they hold them. Afterwards the daemon's pins, pinned slots, slots, clients and open fds are
// back to what they were before, and its anonymous RSS has grown by no more than allocator slack (a bound; not exact).
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "client/client.h"
#include "tests/daemon/epkd_harness.h"

namespace epk {
namespace {

using namespace epk::test_harness;  // NOLINT

constexpr int kTensors = 6;

// Forks `n` clients that each connect, pin one or two tensors, report on `ready` and wait to be killed; kills them
// all once every one has reported (or after 10 s) and reaps them. Returns how many reported.
int kill_batch(const std::string& socket, int n, int first) {
  int ready[2];
  if (::pipe(ready) != 0) return -1;
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(ready[0]);
      auto c = Client::connect(socket, 5000);
      if (!c) ::_exit(1);
      const int k = first + i;
      for (int j = 0; j <= k % 2; ++j) {
        auto t = c->acquire("m", "t" + std::to_string((k + j) % kTensors), shm::Layout::kDenseF32);
        if (!t) ::_exit(2);
      }
      char b = 'r';
      if (::write(ready[1], &b, 1) != 1) ::_exit(3);
      for (;;) ::pause();
    }
    if (pid > 0) pids.push_back(pid);
  }
  ::close(ready[1]);
  int reported = 0;
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (reported < n && Clock::now() < deadline) {
    pollfd p{ready[0], POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[256];
    ssize_t got = ::read(ready[0], buf, sizeof(buf));
    if (got <= 0) break;  // every writer gone
    reported += static_cast<int>(got);
  }
  for (pid_t p : pids) ::kill(p, SIGKILL);
  for (pid_t p : pids) ::waitpid(p, nullptr, 0);
  ::close(ready[0]);
  return reported;
}

struct Snapshot {
  client::Stats stats;
  std::size_t fds = 0;
  std::uint64_t rss_kib = 0;
};

// Waits (bounded) until the daemon has dropped every killed client, then takes the snapshot with `observer` the only
// client.
Snapshot settle(Client& observer, pid_t daemon) {
  Snapshot s;
  auto deadline = Clock::now() + std::chrono::seconds(5);
  for (;;) {
    auto st = observer.stats();
    EXPECT_TRUE(st) << st.error().to_string();
    if (!st) return s;
    s.stats = *st;
    if ((s.stats.clients == 1 && s.stats.pins == 0) || Clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  s.fds = open_fds(daemon);
  s.rss_kib = rss_kib(daemon);
  return s;
}

TEST(EpkdKillStress, AThousandKilledClientsLeakNothing) {
  std::string spec;
  for (int t = 0; t < kTensors; ++t) {
    spec += (t ? ",t" : "t") + std::to_string(t) + ":" + std::to_string(64 + t) + "x96";
  }
  // One malloc arena in the daemon: with one per thread, where a session's memory lands (and stays cached) varies
  // from run to run by megabytes, which would hide a leak of a KiB per client.
  ::setenv("MALLOC_ARENA_MAX", "1", 1);
  Epkd d({"--synthetic", "m=" + spec}, "8");
  ::unsetenv("MALLOC_ARENA_MAX");  // the harness runs it with 3 io threads
  auto observer = d.connect(5000);
  ASSERT_TRUE(observer) << observer.error().to_string();
  // Warm-up: every tensor decoded once, and three batches killed: the allocator's free lists (per-thread arenas) grow
  // to what 100 concurrent sessions take and then stay there; RSS measured from a cold start would count that.
  for (int t = 0; t < kTensors; ++t) {
    auto h = observer->acquire("m", "t" + std::to_string(t), shm::Layout::kDenseF32);
    ASSERT_TRUE(h) << h.error().to_string();
    ASSERT_TRUE(observer->release(h->handle));
  }
  for (int k = 0; k < 300; k += 100) ASSERT_EQ(kill_batch(d.socket(), 100, k), 100);
  const Snapshot before = settle(*observer, d.pid());
  ASSERT_EQ(before.stats.pins, 0u);
  ASSERT_EQ(before.stats.clients, 1u);

  constexpr int kKills = 1000, kBatch = 100;
  auto kill_round = [&](int first) {
    for (int k = first; k < first + kKills; k += kBatch) {
      ASSERT_EQ(kill_batch(d.socket(), kBatch, k), kBatch) << "batch at " << k;
      auto mid = observer->stats();  // the daemon keeps serving throughout
      ASSERT_TRUE(mid) << mid.error().to_string();
      std::printf("after %d kills: daemon RSS %llu KiB\n", k + kBatch,
                  static_cast<unsigned long long>(rss_kib(d.pid())));
    }
  };
  // Two rounds: the first still grows malloc's free lists by a varying amount (+1 to +9 MiB seen from the same
  // start), the second is measured against the first's end, where a leak would keep growing and the lists do not.
  kill_round(300);
  const Snapshot middle = settle(*observer, d.pid());
  auto t0 = Clock::now();
  kill_round(300 + kKills);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const Snapshot after = settle(*observer, d.pid());
  std::printf("%d clients killed in %.2f s; daemon fds %zu -> %zu, anon RSS %llu -> %llu KiB, slots %llu -> %llu\n",
              kKills, seconds, before.fds, after.fds, static_cast<unsigned long long>(before.rss_kib),
              static_cast<unsigned long long>(after.rss_kib), static_cast<unsigned long long>(before.stats.slots),
              static_cast<unsigned long long>(after.stats.slots));
  EXPECT_EQ(after.stats.pins, 0u);
  EXPECT_EQ(after.stats.pinned_slots, 0u);
  EXPECT_EQ(after.stats.pinned_bytes, 0u);
  EXPECT_EQ(after.stats.clients, 1u);
  EXPECT_EQ(after.stats.slots, before.stats.slots);
  EXPECT_EQ(after.stats.used_bytes, before.stats.used_bytes);
  EXPECT_EQ(after.stats.decodes, before.stats.decodes);  // every pin was a hit on a cached slot
  EXPECT_EQ(after.fds, before.fds);
  // Not exact: freed session memory stays in malloc's free lists, fragmented (every Session was seen destroyed when
  // counted by hand). Measured here after the warm-up: anonymous RSS +1.1 to +9.4 MiB over the first 1000 kills,
  // levelling off over 6000 kills. The bound, on the second 1000, catches a leaked session (64 KiB of read buffer
  // each: 64 MiB per 1000) or a leak of 8 KiB or more per client, not a smaller one.
  std::printf("second 1000: anon RSS %llu -> %llu KiB\n", static_cast<unsigned long long>(middle.rss_kib),
              static_cast<unsigned long long>(after.rss_kib));
  EXPECT_LE(after.rss_kib, middle.rss_kib + 8192);
  observer = make_error(ErrorCode::kIo, "closed");
  EXPECT_EQ(d.terminate(), 0);
}

}  // namespace
}  // namespace epk
