// Starts the real epkd on a temporary socket and talks to it from real client processes (epk_test_client), from this
// process through libepk, and through raw sockets (malformed traffic: epkd_malformed_test.cc). Loopback only; every wait is bounded.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "codec/common/bytes.h"
#include "daemon/sources/synthetic_source.h"
#include "shm/fd_passing.h"
#include "shm/protocol.h"
#include "shm/spin.h"
#include "tests/daemon/epkd_harness.h"
#include "tests/daemon/raw_wire.h"

namespace epk {
namespace {

using namespace epk::test_harness;  // NOLINT
using Clock = std::chrono::steady_clock;

std::string spec(int n, const char* dims) {
  std::string s;
  for (int i = 0; i < n; ++i) s += (i ? "," : "") + std::string("t") + std::to_string(i) + ":" + dims;
  return s;
}

// ---- tests ----

TEST(Epkd, ConcurrentAcquiresOfOneTensorDecodeOnce) {
  Epkd d({"--synthetic", "m=t0:300x257", "--synthetic-delay-us", "500000", "--threads", "2"});
  ASSERT_TRUE(d.running());
  // Every client connects first; then all are let go at once, well inside the 500 ms decode.
  std::vector<Child> kids;
  for (int i = 0; i < 8; ++i) kids.push_back(d.client({"acquire", "m", "t0", "dense:bf16", "0"}, true));
  for (Child& k : kids) ASSERT_EQ(read_line(k.out, 10000), "connected");
  for (Child& k : kids) ASSERT_EQ(::write(k.in, "g", 1), 1);
  for (Child& k : kids) {
    EXPECT_EQ(wait_exit(k.pid, 10000), 0);
    ::close(k.out);
    ::close(k.in);
  }
  client::Stats s = d.stats();
  EXPECT_EQ(s.decodes, 1u);
  EXPECT_EQ(s.misses, 8u);
  EXPECT_EQ(s.pins, 0u);
  EXPECT_EQ(d.terminate(), 0);
}

// Cache hits from sessions on every io thread at once (the lane lock alone on that path, its shared side where other
// sessions hold the slot pinned; --check-invariants verifies the cache after each change under the exclusive side):
// every hit is counted once (per-io-thread counters summed), every pin goes, and a clean SIGTERM finds the invariants
// intact (exit 0, not 3).
TEST(Epkd, ConcurrentHitsOnEveryIoThread) {
  Epkd d({"--synthetic", "m=t0:64x33,t1:17x5"}, "4");
  ASSERT_TRUE(d.running());
  constexpr int kThreads = 7, kPairs = 301;
  {  // fill both slots: two misses, then every acquire below hits
    auto c = Client::connect(d.socket(), 2000);
    ASSERT_TRUE(c) << c.error().to_string();
    for (const char* t : {"t0", "t1"}) {
      auto a = c->acquire("m", t, shm::Layout::kDenseF32);
      ASSERT_TRUE(a) << a.error().to_string();
      ASSERT_TRUE(c->release(a->handle));
    }
  }
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      auto c = Client::connect(d.socket(), 2000);
      if (!c) return (void)failures.fetch_add(1);
      const char* tensor = i % 3 == 2 ? "t1" : "t0";
      for (int k = 0; k < kPairs; ++k) {
        auto a = c->acquire("m", tensor, shm::Layout::kDenseF32);
        if (!a || !c->release(a->handle)) return (void)failures.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  client::Stats s = d.stats();
  EXPECT_EQ(s.hits, std::uint64_t{kThreads} * kPairs);
  EXPECT_EQ(s.misses, 2u);
  EXPECT_EQ(s.pins, 0u);
  EXPECT_EQ(d.terminate(), 0);
}


// The tensor list arrives in file order over as many messages as it takes (3000 entries are more than one holds).
TEST(Epkd, TheTensorListComesInPages) {
  Epkd d({"--synthetic", "m=" + spec(3000, "3x5") + ",last:7x2"});
  auto c = d.connect(5000);
  ASSERT_TRUE(c) << c.error().to_string();
  auto ts = c->tensors("m");
  ASSERT_TRUE(ts) << ts.error().to_string();
  ASSERT_EQ(ts->size(), 3001u);
  for (std::size_t i = 0; i < 3000; ++i) {
    ASSERT_EQ((*ts)[i].name, "t" + std::to_string(i));
    ASSERT_EQ((*ts)[i].shape, (std::vector<std::uint64_t>{3, 5}));
    ASSERT_EQ((*ts)[i].encoding, "synthetic");
  }
  EXPECT_EQ(ts->back().name, "last");
  EXPECT_EQ(ts->back().shape, (std::vector<std::uint64_t>{7, 2}));
  auto none = c->tensors("nope");
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, ErrorCode::kNotFound);
  expect_serving(d);
}

TEST(Epkd, EvictionUnderPressureStaysInTheBudget) {
  Epkd d({"--synthetic", "m=" + spec(8, "256x256")});  // 8 x 256 KiB against 1 MiB
  auto c = d.connect();
  ASSERT_TRUE(c);
  for (int round = 0; round < 3; ++round) {
    for (int t = 0; t < 8; ++t) {
      auto x = c->acquire("m", "t" + std::to_string(t), shm::Layout::kStored);
      ASSERT_TRUE(x) << x.error().to_string();
      ASSERT_EQ(x->bytes, 256u * 1024);
      ASSERT_TRUE(c->release(x->handle));
    }
  }
  auto s = c->stats();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->misses, 24u);  // LRU over a cycle larger than the cache: every access misses
  EXPECT_EQ(s->decodes, 24u);
  EXPECT_EQ(s->evictions, 20u);
  EXPECT_LE(s->used_bytes, s->budget_bytes);
  EXPECT_EQ(s->budget_bytes, 1u << 20);
  EXPECT_EQ(d.terminate(), 0);  // exit 0 also says every --check-invariants pass held
}

TEST(Epkd, PinnedSlotsSurvivePressure) {
  Epkd d({"--synthetic", "m=" + spec(8, "256x256")});
  ASSERT_TRUE(d.running());
  Child holder = d.client({"acquire", "m", "t0", "stored", "-1"});
  ASSERT_EQ(read_line(holder.out, 5000).rfind("acquired", 0), 0u);
  auto c = Client::connect(d.socket());
  ASSERT_TRUE(c);
  for (int round = 0; round < 2; ++round) {
    for (int t = 1; t < 8; ++t) {
      auto x = c->acquire("m", "t" + std::to_string(t), shm::Layout::kStored);
      ASSERT_TRUE(x) << x.error().to_string();
      ASSERT_TRUE(c->release(x->handle));
    }
  }
  auto before = c->stats();
  auto t0 = c->acquire("m", "t0", shm::Layout::kStored);  // still cached: a hit, no decode
  ASSERT_TRUE(t0);
  auto after = c->stats();
  EXPECT_EQ(after->hits, before->hits + 1);
  EXPECT_EQ(after->decodes, before->decodes);
  // With t0 (2 pins) and three more pinned, a fifth 256 KiB tensor cannot fit: refused, nothing pinned evicted.
  std::vector<std::uint64_t> held;
  for (int t = 1; t <= 3; ++t) {
    auto x = c->acquire("m", "t" + std::to_string(t), shm::Layout::kStored);
    ASSERT_TRUE(x);
    held.push_back(x->handle);
  }
  auto refused = c->acquire("m", "t4", shm::Layout::kStored);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kNoSpace);
  EXPECT_TRUE(c->acquire("m", "t0", shm::Layout::kStored));  // the pinned slots are all still there
  ::kill(holder.pid, SIGKILL);
  wait_exit(holder.pid, 2000);
  ::close(holder.out);
  EXPECT_EQ(d.terminate(), 0);
}

std::size_t open_fds(pid_t pid) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd"))
    ++n;
  return n;
}

TEST(Epkd, KilledClientLosesItsPinsWithinOneSecond) {
  Epkd d({"--synthetic", "m=" + spec(2, "64x64")});
  ASSERT_TRUE(d.running());
  std::size_t fds_before = 0;
  for (int round = 0; round < 50; ++round) {
    // Asio opens each io thread's epoll, eventfd and timerfd with its first session: count after every thread has one.
    // The daemon closes a finished session asynchronously, so let closes settle before counting.
    if (round == 5) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      fds_before = open_fds(d.pid());
    }
    Child holder = d.client({"acquire", "m", "t" + std::to_string(round % 2), "dense:fp16", "-1"});
    ASSERT_EQ(read_line(holder.out, 5000).rfind("acquired", 0), 0u);
    ASSERT_EQ(d.stats().pins, 1u);
    ::kill(holder.pid, SIGKILL);
    auto killed_at = Clock::now();
    wait_exit(holder.pid, 2000);
    ::close(holder.out);
    std::uint64_t pins = 1;
    while (pins != 0 && Clock::now() - killed_at < std::chrono::seconds(1)) {
      pins = d.stats().pins;
      if (pins != 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_EQ(pins, 0u) << "round " << round << ": pins still held 1 s after SIGKILL";
  }
  // Only the stats connection: no session leaked. The previous stats connections close asynchronously (the client
  // does not wait for the daemon's side), so the count may need a moment to settle.
  client::Stats s = d.stats();
  for (auto until = Clock::now() + std::chrono::seconds(1); s.clients != 1u && Clock::now() < until; s = d.stats()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(s.clients, 1u);
  EXPECT_EQ(s.pinned_slots, 0u);
  auto settle = Clock::now() + std::chrono::seconds(1);
  while (open_fds(d.pid()) > fds_before && Clock::now() < settle)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_LE(open_fds(d.pid()), fds_before);  // no socket leaked either
  EXPECT_EQ(d.terminate(), 0);
}

TEST(Epkd, SixtyFourClientsUnderPressure) {
  // 12 tensors in fp32 (64 KiB each) and bf16 (32 KiB each): 1.125 MiB of slots against a 1 MiB budget.
  Epkd d({"--synthetic", "m=" + spec(12, "128x128"), "--threads", "2"});
  ASSERT_TRUE(d.running());
  std::vector<Child> kids;
  std::string all = "t0,t1,t2,t3,t4,t5,t6,t7,t8,t9,t10,t11";
  for (int i = 0; i < 64; ++i) kids.push_back(d.client({"cycle", "m", all, i % 2 ? "dense:bf16" : "dense:fp32", "2"}));
  for (Child& k : kids) {
    EXPECT_EQ(wait_exit(k.pid, 60000), 0);
    ::close(k.out);
  }
  client::Stats s = d.stats();
  EXPECT_LE(s.used_bytes, s.budget_bytes);
  EXPECT_EQ(s.pins, 0u);
  EXPECT_GT(s.evictions, 0u);
  EXPECT_EQ(d.terminate(), 0);
}

TEST(Epkd, PrefetchDecodesAheadSoTheAcquireHits) {
  Epkd d({"--synthetic", "m=" + spec(3, "100x100")});
  auto c = d.connect();
  ASSERT_TRUE(c);
  auto q = c->prefetch("m", {"t0", "t1", "nope"}, shm::Layout::kDenseBF16);
  ASSERT_TRUE(q) << q.error().to_string();
  EXPECT_EQ(*q, 2u);
  auto deadline = Clock::now() + std::chrono::seconds(5);
  while (c->stats()->decodes < 2 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  auto t = c->acquire("m", "t1", shm::Layout::kDenseBF16);
  ASSERT_TRUE(t);
  auto s = c->stats();
  EXPECT_EQ(s->hits, 1u);
  EXPECT_EQ(s->misses, 0u);
  EXPECT_EQ(s->prefetches, 2u);
  EXPECT_EQ(d.terminate(), 0);
}

// A session's read buffer starts at 4 KiB (daemon/net/session.h): a prefetch of 255 names (about 10 KiB) is read whole
// all the same, and the session goes on with small messages after it.
TEST(Epkd, AMessageLongerThanTheFirstReadBufferIsServed) {
  Epkd d({"--synthetic", "m=" + spec(3, "16x16")});
  auto c = d.connect();
  ASSERT_TRUE(c);
  std::vector<std::string> names;
  for (int i = 0; i < 254; ++i) names.push_back("a_tensor_name_that_no_model_has_" + std::to_string(i));
  names.push_back("t2");
  auto q = c->prefetch("m", names, shm::Layout::kDenseF32);
  ASSERT_TRUE(q) << q.error().to_string();
  EXPECT_EQ(*q, 1u);
  auto t = c->acquire("m", "t0", shm::Layout::kDenseF32);
  ASSERT_TRUE(t) << t.error().to_string();
  EXPECT_EQ(t->bytes, 16u * 16u * 4u);
  EXPECT_EQ(d.terminate(), 0);
}

TEST(Epkd, ReleaseWithoutWaitingDropsThePinAndCountsAFailureLater) {
  Epkd d({"--synthetic", "m=t0:8x8"});
  auto c = d.connect();
  ASSERT_TRUE(c);
  auto t = c->acquire("m", "t0", shm::Layout::kStored);
  ASSERT_TRUE(t);
  ASSERT_TRUE(c->release_nowait(t->handle));
  EXPECT_EQ(c->stats()->pins, 0u);            // the daemon handles messages of a session in order
  ASSERT_TRUE(c->release_nowait(t->handle));  // no longer pinned: the failure comes back later
  auto s = c->stats();
  ASSERT_TRUE(s) << s.error().to_string();  // the stray error reply does not disturb the next call
  EXPECT_EQ(c->deferred_release_errors(), 1u);
  EXPECT_TRUE(c->acquire("m", "t0", shm::Layout::kStored));
  EXPECT_EQ(d.terminate(), 0);
}

TEST(Epkd, ErrorsThatKeepTheSessionOpen) {
  Epkd d({"--synthetic", "m=t0:8x8,t1:4:corrupt", "--model", "broken=/nonexistent/broken.epk"});
  ASSERT_TRUE(d.running());  // the refused model does not stop the others
  auto c = Client::connect(d.socket());
  ASSERT_TRUE(c);
  auto broken = c->open_model("broken");
  ASSERT_FALSE(broken);
  EXPECT_EQ(broken.error().code, ErrorCode::kNotFound);
  auto missing = c->acquire("m", "nope", shm::Layout::kStored);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  auto layout = c->acquire("m", "t0", shm::Layout::kRowwiseI8);
  ASSERT_FALSE(layout);
  EXPECT_EQ(layout.error().code, ErrorCode::kUnsupported);
  auto corrupt = c->acquire("m", "t1", shm::Layout::kStored);
  ASSERT_FALSE(corrupt);
  EXPECT_EQ(corrupt.error().code, ErrorCode::kCorruptTile);
  EXPECT_FALSE(c->release(12345));
  auto ok = c->acquire("m", "t0", shm::Layout::kStored);  // same session, still served
  ASSERT_TRUE(ok) << ok.error().to_string();
  EXPECT_EQ(static_cast<const float*>(ok->data)[0] * 0, 0.0f);
  EXPECT_TRUE(c->release(ok->handle));
  EXPECT_EQ(d.terminate(), 0);
}

// Protocol version 3 on the host path: the host pool answers device 0 only; per-pool stats list it.
TEST(Epkd, HostPathServesDeviceZeroAndRefusesOthers) {
  Epkd d({"--synthetic", "m=t0:8x8,t1:16x4"});
  auto c = d.connect();
  ASSERT_TRUE(c);
  auto t = c->acquire("m", "t0", shm::Layout::kStored, 0);
  ASSERT_TRUE(t) << t.error().to_string();
  EXPECT_EQ(shm::handle_pool(t->handle), 0u);
  for (std::uint32_t device : {1u, 7u, 0xFFFFFFFFu}) {
    auto other = c->acquire("m", "t1", shm::Layout::kStored, device);
    ASSERT_FALSE(other) << device;
    EXPECT_EQ(other.error().code, ErrorCode::kNotFound);
    EXPECT_NE(other.error().message.find("device " + std::to_string(device)), std::string::npos)
        << other.error().message;
    auto pre = c->prefetch("m", {"t1"}, shm::Layout::kStored, device);
    ASSERT_FALSE(pre);
    EXPECT_EQ(pre.error().code, ErrorCode::kNotFound);
  }
  // A handle naming a pool that does not exist.
  auto bad = c->release((std::uint64_t{5} << shm::kHandlePoolShift) | 1);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kNotFound);
  auto s = c->stats();  // the session is still open
  ASSERT_TRUE(s) << s.error().to_string();
  ASSERT_EQ(s->pools.size(), 1u);
  EXPECT_EQ(s->pools[0].pool_id, 0u);
  EXPECT_EQ(s->pools[0].device, -1);
  EXPECT_EQ(s->pools[0].budget_bytes, 1u << 20);
  EXPECT_EQ(s->pools[0].budget_bytes, s->budget_bytes);
  EXPECT_EQ(s->pools[0].used_bytes, s->used_bytes);
  EXPECT_GE(s->pools[0].used_bytes, 8u * 8 * 4);
  EXPECT_EQ(s->pools[0].pins, 1u);
  EXPECT_EQ(s->pools[0].misses, 1u);
  EXPECT_EQ(s->pools[0].resident_bytes, 0u);
  EXPECT_TRUE(c->release(t->handle));
  EXPECT_EQ(c->stats()->pools[0].pins, 0u);
  EXPECT_EQ(d.terminate(), 0);
}

TEST(Epkd, SigtermWithAClientHoldingPinsExitsZeroAndRemovesTheSocket) {
  Epkd d({"--synthetic", "m=t0:8x8"});
  ASSERT_TRUE(d.running());
  Child holder = d.client({"acquire", "m", "t0", "stored", "-1"});
  ASSERT_EQ(read_line(holder.out, 5000).rfind("acquired", 0), 0u);
  std::string sock = d.socket();
  auto t0 = Clock::now();
  EXPECT_EQ(d.terminate(), 0);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(3));
  EXPECT_FALSE(std::filesystem::exists(sock));
  ::kill(holder.pid, SIGKILL);
  wait_exit(holder.pid, 2000);
  ::close(holder.out);
}

TEST(Epkd, SighupOpensModelsAddedToTheConfigFile) {
  std::string cfg = std::filesystem::temp_directory_path() / ("epkd_hup_" + std::to_string(::getpid()) + ".toml");
  std::ofstream(cfg) << "[[synthetic]]\nname = \"m\"\nspec = \"t0:8x8\"\n";
  Epkd d({"--config", cfg});
  auto c = d.connect();
  ASSERT_TRUE(c);
  EXPECT_FALSE(c->open_model("late"));
  std::ofstream(cfg, std::ios::app) << "[[synthetic]]\nname = \"late\"\nspec = \"t0:4x4\"\n";
  ::kill(d.pid(), SIGHUP);
  auto deadline = Clock::now() + std::chrono::seconds(5);
  bool found = false;
  while (!found && Clock::now() < deadline) {
    found = static_cast<bool>(c->open_model("late"));
    if (!found) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(found);
  auto t = c->acquire("late", "t0", shm::Layout::kStored);
  ASSERT_TRUE(t) << t.error().to_string();
  EXPECT_EQ(t->bytes, 64u);
  EXPECT_TRUE(c->acquire("m", "t0", shm::Layout::kStored));  // the first model is untouched
  EXPECT_EQ(d.terminate(), 0);
  std::filesystem::remove(cfg);
}

TEST(Epkd, DaemonRestartOnTheSameSocketAndClientsReconnect) {
  std::string dir = std::filesystem::temp_directory_path() / ("epkd_restart_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string sock = dir + "/epkd.sock";
  std::optional<Client> old;
  {
    Epkd first({"--synthetic", "m=t0:8x8"}, "1", sock);
    ASSERT_TRUE(first.running());
    auto c = Client::connect(sock);
    ASSERT_TRUE(c);
    ASSERT_TRUE(c->acquire("m", "t0", shm::Layout::kStored));
    old.emplace(std::move(*c));
    ASSERT_EQ(first.terminate(), 0);
  }
  auto gone = old->acquire("m", "t0", shm::Layout::kStored);
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, ErrorCode::kIo);
  Epkd second({"--synthetic", "m=t0:8x8"}, "1", sock);
  ASSERT_TRUE(second.running());
  auto again = Client::connect(sock);
  ASSERT_TRUE(again) << again.error().to_string();
  auto t = again->acquire("m", "t0", shm::Layout::kStored);
  ASSERT_TRUE(t);
  EXPECT_EQ(static_cast<const float*>(t->data)[3], daemon::synthetic_value(0, 3));
  EXPECT_EQ(second.terminate(), 0);
  std::filesystem::remove_all(dir);
}

TEST(Epkd, SecondDaemonOnALiveSocketRefusesToStart) {
  Epkd d({"--synthetic", "m=t0:8x8"});
  ASSERT_TRUE(d.running());
  Child second = spawn(
      {EPKD_PATH, "--socket", d.socket(), "--budget-mb", "1", "--synthetic", "m=t0:8x8", "--log-level", "off"}, false);
  EXPECT_EQ(wait_exit(second.pid, 5000), 1);
  expect_serving(d);
  EXPECT_EQ(d.terminate(), 0);
}

// Both sides polling (epkd's io threads after each request, the client on its socket before blocking): replies still
// arrive in order and a miss that outlasts the client's poll window is still answered (the client then blocks).
TEST(Epkd, SpinningDaemonAndClientServeHitsAndSlowMisses) {
  Epkd d({"--synthetic", "m=t0:64x33,t1:17x5", "--synthetic-delay-us", "30000", "--spin-us", "200"});
  ASSERT_TRUE(d.running());
  client::ClientOptions o;
  o.reply_timeout_ms = 5000;
  o.spin_us = 100;  // shorter than the 30 ms decode: the miss is waited for by a blocking recv
  auto c = Client::connect(d.socket(), o);
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ(c->spin_us(), 100);
  for (int i = 0; i < 200; ++i) {
    auto t = c->acquire("m", i % 2 ? "t0" : "t1", shm::Layout::kDenseF32);
    ASSERT_TRUE(t) << t.error().to_string();
    ASSERT_TRUE(i % 3 ? c->release(t->handle) : c->release_nowait(t->handle));
  }
  auto s = c->stats();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->decodes, 2u);
  EXPECT_EQ(s->pins, 0u);
  EXPECT_EQ(c->deferred_release_errors(), 0u);
  EXPECT_EQ(d.terminate(), 0);
}

// EPK_SPIN_US is the fallback when ClientOptions::spin_us is negative; anything but a count up to 1 s means 0; unset,
// the automatic window of shm/spin.h for this machine's cores.
TEST(Epkd, ClientSpinFromTheEnvironment) {
  Epkd d({"--synthetic", "m=t0:8x8"});
  ASSERT_TRUE(d.running());
  const char* old = std::getenv("EPK_SPIN_US");
  const std::string saved = old != nullptr ? old : "";
  auto spin_with = [&](const char* env, int option) {
    ::setenv("EPK_SPIN_US", env, 1);
    client::ClientOptions o;
    o.spin_us = option;
    auto c = Client::connect(d.socket(), o);
    EXPECT_TRUE(c) << c.error().to_string();
    return c ? c->spin_us() : -100;
  };
  EXPECT_EQ(spin_with("25", -1), 25);
  EXPECT_EQ(spin_with("25", 0), 0);  // an explicit 0 wins over the environment
  EXPECT_EQ(spin_with("7", 9), 9);
  EXPECT_EQ(spin_with("abc", -1), 0);
  EXPECT_EQ(spin_with("-5", -1), 0);
  EXPECT_EQ(spin_with("2000000", -1), 0);
  EXPECT_EQ(spin_with("12x", -1), 0);
  ::unsetenv("EPK_SPIN_US");
  client::ClientOptions unset;
  auto auto_spin = Client::connect(d.socket(), unset);
  ASSERT_TRUE(auto_spin) << auto_spin.error().to_string();
  EXPECT_EQ(auto_spin->spin_us(), static_cast<int>(shm::auto_spin_us(std::thread::hardware_concurrency())));
  if (old != nullptr) {
    ::setenv("EPK_SPIN_US", saved.c_str(), 1);
  } else {
    ::unsetenv("EPK_SPIN_US");
  }
  client::ClientOptions too_long;
  too_long.spin_us = 1000001;
  EXPECT_FALSE(Client::connect(d.socket(), too_long));
  EXPECT_EQ(d.terminate(), 0);
}

}  // namespace
}  // namespace epk
