// Fair shares against a real epkd (--cpu, host pools): one uid's sessions together pin at most their share while
// another uid is served, and shard slots of many sizes neither fragment the pool nor grow epkd's metadata. Cases
// switch uid and need root; they skip otherwise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "codec/container/writer.h"
#include "tests/daemon/epk_test_models.h"
#include "tests/daemon/epkd_harness.h"
#include "tests/daemon/trust_helpers.h"

namespace epk {
namespace {

using namespace epk::trust_test;  // NOLINT

// Fair shares against a real epkd: one uid's eight sessions together pin at most uid_pinned_percent (50) of the
// 4 MiB budget, each refusal naming the share; meanwhile another uid acquires every tensor of a model that fits its
// share, and an acquire that finds no space logs the uids holding the pins (the log only, not the refusal).
TEST(EpkdTrust, OneUidsSessionsTogetherPinAtMostItsShareAndAnotherUidIsServed) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to connect as another uid";
  std::string a_spec, b_spec;
  for (int i = 0; i < 16; ++i) a_spec += (i ? ",a" : "a") + std::to_string(i) + ":256x256";  // 256 KiB each
  for (int i = 0; i < 6; ++i) b_spec += (i ? ",b" : "b") + std::to_string(i) + ":256x256";
  const ConfigFile cfg("[[synthetic]]\nname = \"a\"\nspec = \"" + a_spec + "\"\n[[synthetic]]\nname = \"b\"\nspec = \"" +
                       b_spec + "\"\n");
  Epkd d({"--config", cfg.path()}, "4");
  ASSERT_TRUE(d.running());
  const std::string socket = open_socket_dir(d);
  // The baseline after sessions have run on every io thread (each thread's reactor opens its fds at its first).
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(Client::connect(socket, 5000));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const std::size_t fds_before = open_fds(d.pid());
  const std::uint64_t rss_before = rss_kib(d.pid());
  HeldChild attacker(kNobody, [&](const HeldChild::Hold& hold) {
    std::vector<Client> sessions;
    for (int i = 0; i < 8; ++i) {
      auto c = Client::connect(socket, 5000);
      if (!c) return 91;
      sessions.push_back(std::move(*c));
    }
    int held = 0, refused = 0;
    for (int i = 0; i < 16; ++i) {
      auto t = sessions[i % 8].acquire("a", "a" + std::to_string(i), shm::Layout::kDenseF32);
      if (t) {
        ++held;
      } else if (t.error().code == ErrorCode::kQuota &&
                 t.error().message.find("uid_pinned_percent = 50") != std::string::npos) {
        ++refused;
      } else {
        return 92;
      }
    }
    hold(std::to_string(held) + " " + std::to_string(refused));
    return 0;
  });
  const std::string line = attacker.report(60000);
  int held = -1, refused = -1;
  ASSERT_EQ(std::sscanf(line.c_str(), "%d %d", &held, &refused), 2) << "the attacker said '" << line << "'";
  EXPECT_GE(held, 1);
  EXPECT_GE(refused, 1);
  EXPECT_LE(std::uint64_t(held) * (256u << 10), 2u << 20) << "one uid pinned past its share";
  EXPECT_LE(d.stats().pools.at(0).pinned_bytes, 2u << 20);
  // The other uid: every tensor of "b" (1.5 MiB, within its share), held at once, each the bytes root reads.
  EXPECT_EQ(run_as_client(4242, socket, [&](Client& c) {
              std::vector<std::uint64_t> handles;
              for (int i = 0; i < 6; ++i) {
                auto t = c.acquire("b", "b" + std::to_string(i), shm::Layout::kDenseF32);
                if (!t || t->bytes != 256u << 10) return 2;
                handles.push_back(t->handle);
              }
              for (auto h : handles) {
                if (!c.release(h)) return 3;
              }
              return 0;
            }),
            0);
  // Root (uncapped) pins what is left until no space remains: the refusal is for space, and the log names the
  // holders with their bytes.
  auto root = Client::connect(socket, 5000);
  ASSERT_TRUE(root);
  bool no_space = false;
  for (int i = 0; i < 22 && !no_space; ++i) {
    auto t = i < 16 ? root->acquire("a", "a" + std::to_string(i), shm::Layout::kDenseF32)
                    : root->acquire("b", "b" + std::to_string(i - 16), shm::Layout::kDenseF32);
    if (!t) {
      EXPECT_EQ(t.error().code, ErrorCode::kNoSpace) << t.error().to_string();
      EXPECT_EQ(t.error().message.find("65534"), std::string::npos) << "the refusal names another uid";
      no_space = true;
    }
  }
  EXPECT_TRUE(no_space);
  EXPECT_EQ(attacker.release(), 0);
  // The attacker gone, its sessions' fds and buffers are too (root's one session stays).
  auto deadline = Clock::now() + std::chrono::seconds(3);
  while (Clock::now() < deadline && open_fds(d.pid()) > fds_before + 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_LE(open_fds(d.pid()), fds_before + 1);
  const std::uint64_t rss_after = rss_kib(d.pid());
  if (kHeapMeasurable) {
    EXPECT_LE(rss_after, rss_before + 2048) << "RssAnon " << rss_before << " -> " << rss_after << " KiB";
  }
  std::printf("share attack (8 sessions of one uid): held %d, refused %d; fds %zu -> %zu, RssAnon %llu -> %llu KiB\n",
              held, refused, fds_before, open_fds(d.pid()), static_cast<unsigned long long>(rss_before),
              static_cast<unsigned long long>(rss_after));
  const std::string log = read_file(d.log_path());
  const auto at = log.find("acquire_blocked ");
  ASSERT_NE(at, std::string::npos) << log;
  const std::string holders = log.substr(at, log.find('\n', at) - at);
  EXPECT_NE(holders.find("pin_holders="), std::string::npos) << holders;
  // Root holds the whole pool (it pinned the attacker's slots too: a shared slot counts for each uid pinning it).
  EXPECT_NE(holders.find("0:" + std::to_string(4u << 20)), std::string::npos) << holders;
  EXPECT_NE(holders.find(",65534:" + std::to_string(held * (256 << 10))), std::string::npos) << holders;
  EXPECT_EQ(d.terminate(), 0);
}

// Fragmentation and slot metadata against a real epkd: one uid acquires and releases 2048 distinct 256-byte row
// shards (one row of 32 small tensors each), then keeps as many pinned, spread out, as its share lets it; another uid then acquires and holds every
// tensor of a 1.5 MiB model. The small slots live in the small-slot arena, so the main region stays whole; the slot
// count stays within max_slots_per_pool, and so does epkd's heap (the cached slots' metadata, a few KiB each, stays
// until they are evicted); epkd's fds come back once the attacker is gone.
TEST(EpkdTrust, SmallShardSlotsNeitherFragmentThePoolNorGrowItsMetadata) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to connect as another uid";
  // 32 tensors of 64 rows of 256 bytes (the decode of a shard makes its tensor: small ones keep 2048 decodes quick,
  // under sanitizers too), and a warm-up tensor; shard i is row i % 64 of tensor i / 64.
  std::string small_spec = "w:64x64";
  for (int i = 0; i < 32; ++i) small_spec += ",s" + std::to_string(i) + ":64x64";
  const auto shard = [](std::uint64_t i) {
    return std::make_pair("s" + std::to_string(i / 64), shm::ShardSpec::rows(i % 64, i % 64 + 1));
  };
  const ConfigFile cfg(
      "max_slots_per_pool = 500\n"
      "[[synthetic]]\nname = \"s\"\nspec = \"" + small_spec + "\"\n"
      "[[synthetic]]\nname = \"big\"\nspec = \"l0:256x256,l1:256x256,l2:256x256,l3:256x256,l4:256x256,l5:256x256\"\n");
  Epkd d({"--config", cfg.path()}, "8");
  ASSERT_TRUE(d.running());
  const std::string socket = open_socket_dir(d);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(Client::connect(socket, 5000));  // every io thread's reactor (above)
  {
    // The decode threads' malloc arenas warmed (each keeps a freed decode buffer): the baseline below is then what
    // the slots' metadata adds to.
    auto warm = Client::connect(socket, 5000);
    ASSERT_TRUE(warm);
    for (std::uint64_t r = 0; r < 64; ++r) {
      auto t = warm->acquire("s", "w", shm::Layout::kDenseF32, 0, shm::ShardSpec::rows(r, r + 1));
      ASSERT_TRUE(t && warm->release(t->handle));
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const std::size_t fds_before = open_fds(d.pid());
  const std::uint64_t rss_before = rss_kib(d.pid());
  HeldChild attacker(kNobody, [&](const HeldChild::Hold& hold) {
    auto c = Client::connect(socket, 5000);
    if (!c) return 91;
    for (std::uint64_t i = 0; i < 2048; ++i) {
      const auto [name, rows] = shard(i);
      auto t = c->acquire("s", name, shm::Layout::kDenseF32, 0, rows);
      if (!t || t->bytes != 256 || !c->release(t->handle)) return 92;
    }
    int pinned = 0;
    for (std::uint64_t i = 0; i < 2048; i += 16) {
      const auto [name, rows] = shard(i);
      auto t = c->acquire("s", name, shm::Layout::kDenseF32, 0, rows);
      if (!t) break;
      ++pinned;
    }
    hold(std::to_string(pinned));
    return 0;
  });
  const std::string line = attacker.report(60000);
  ASSERT_FALSE(line.empty()) << "the attacker did not report";
  const int pinned = std::atoi(line.c_str());
  EXPECT_GE(pinned, 16) << "the attacker could pin next to nothing";
  const shm::StatsReply mid = d.stats();
  EXPECT_LE(mid.pools.at(0).slots, 500u) << "more slots than max_slots_per_pool";
  EXPECT_EQ(run_as_client(4242, socket, [&](Client& c) {
              std::vector<std::uint64_t> handles;
              for (int i = 0; i < 6; ++i) {
                auto t = c.acquire("big", "l" + std::to_string(i), shm::Layout::kDenseF32);
                if (!t) {
                  std::fprintf(stderr, "l%d: %s\n", i, t.error().to_string().c_str());
                  return 2;
                }
                handles.push_back(t->handle);
              }
              for (auto h : handles) {
                if (!c.release(h)) return 3;
              }
              return 0;
            }),
            0);
  EXPECT_EQ(attacker.release(), 0);
  auto deadline = Clock::now() + std::chrono::seconds(3);
  while (Clock::now() < deadline && open_fds(d.pid()) > fds_before) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_LE(open_fds(d.pid()), fds_before);
  const std::uint64_t rss_after = rss_kib(d.pid());
  if (kHeapMeasurable) {
    EXPECT_LE(rss_after, rss_before + 2048) << "RssAnon " << rss_before << " -> " << rss_after << " KiB";
  }
  std::printf("shard attack (2048 shard slots, every 16th of them pinned: %d): slots %llu, fds %zu -> %zu, RssAnon %llu -> "
              "%llu KiB\n",
              pinned, static_cast<unsigned long long>(mid.pools.at(0).slots), fds_before, open_fds(d.pid()),
              static_cast<unsigned long long>(rss_before), static_cast<unsigned long long>(rss_after));
  EXPECT_EQ(d.terminate(), 0);
}

}  // namespace
}  // namespace epk
