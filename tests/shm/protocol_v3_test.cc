// Protocol version 3 (a pool per device): the device field of acquire and prefetch, per-pool stats, handles that
// carry their pool; round trips and malformed cases.
#include <gtest/gtest.h>

#include "codec/common/bytes.h"
#include "shm/protocol.h"
#include "tests/shm/payload_of.h"

namespace epk::shm {
namespace {

using test::payload_of;

TEST(ProtocolV3, AcquireCarriesTheDevice) {
  std::vector<std::uint8_t> msg;
  encode_acquire(3, {5, Layout::kDenseBF16, "layers.1.w", 7}, &msg);
  auto m = decode_acquire(payload_of(msg));
  ASSERT_TRUE(m) << m.error().to_string();
  EXPECT_EQ(m->device, 7u);
  EXPECT_EQ(m->tensor, "layers.1.w");
  // The device is the last field: 4 bytes after the name.
  EXPECT_EQ(msg.size(), kHeaderSize + 4 + 4 + 2 + 10 + 4);
  EXPECT_EQ(load_le<std::uint32_t>(msg.data() + msg.size() - 4), 7u);
}

TEST(ProtocolV3, AcquireWithoutADeviceMeansDeviceZero) {
  AcquireRequest r{1, Layout::kStored, "t"};
  EXPECT_EQ(r.device, 0u);
  std::vector<std::uint8_t> msg;
  encode_acquire(1, r, &msg);
  auto m = decode_acquire(payload_of(msg));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->device, 0u);
}

TEST(ProtocolV3, AcquireMissingItsDeviceIsRefused) {
  std::vector<std::uint8_t> msg;
  encode_acquire(1, {1, Layout::kStored, "abc", 1}, &msg);
  // A version-2 acquire: the same bytes without the device field, and every shorter cut.
  for (std::size_t cut = 1; cut <= 4; ++cut) {
    auto p = payload_of(msg).first(msg.size() - kHeaderSize - cut);
    auto m = decode_acquire(p);
    ASSERT_FALSE(m) << cut;
    EXPECT_NE(m.error().message.find("device"), std::string::npos) << m.error().message;
  }
  auto longer = msg;
  longer.push_back(0);
  EXPECT_FALSE(decode_acquire(payload_of(longer)));
}

TEST(ProtocolV3, PrefetchCarriesTheDevice) {
  std::vector<std::uint8_t> msg;
  encode_prefetch(4, {2, Layout::kDenseF16, {"x", "", "yy"}, 1}, &msg);
  auto m = decode_prefetch(payload_of(msg));
  ASSERT_TRUE(m) << m.error().to_string();
  EXPECT_EQ(m->device, 1u);
  EXPECT_EQ(m->tensors, (std::vector<std::string>{"x", "", "yy"}));
  auto cut = payload_of(msg).first(msg.size() - kHeaderSize - 2);
  auto bad = decode_prefetch(cut);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("device"), std::string::npos) << bad.error().message;
}

TEST(ProtocolV3, StatsCarryEveryPool) {
  StatsReply m;
  m.used_bytes = 300;
  m.pools.push_back({0, 0, 1000, 100, 10, 1, 1, 2, 3, 4, 5, 77});
  m.pools.push_back({1, 3, 2000, 200, 20, 2, 2, 6, 7, 8, 9, 88, 11, 12, 1ull << 35, 99});
  std::vector<std::uint8_t> msg;
  encode_stats_reply(1, m, &msg);
  auto r = decode_stats_reply(payload_of(msg));
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->used_bytes, 300u);
  ASSERT_EQ(r->pools.size(), 2u);
  EXPECT_EQ(r->pools[0], m.pools[0]);
  EXPECT_EQ(r->pools[1], m.pools[1]);
  EXPECT_EQ(r->pools[1].device, 3);
  EXPECT_EQ(r->pools[1].resident_bytes, 88u);
  EXPECT_EQ(r->pools[1].host_tier_bytes, 1ull << 35);  // version 5
  EXPECT_EQ(r->pools[1].staged_bytes, 99u);
}

TEST(ProtocolV3, StatsWithAHostPoolKeepItsNegativeDevice) {
  StatsReply m;
  m.pools.push_back({0, -1, 4096, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  std::vector<std::uint8_t> msg;
  encode_stats_reply(1, m, &msg);
  auto r = decode_stats_reply(payload_of(msg));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->pools.size(), 1u);
  EXPECT_EQ(r->pools[0].device, -1);
}

TEST(ProtocolV3, StatsPoolCountIsChecked) {
  StatsReply m;
  m.pools.resize(2);
  std::vector<std::uint8_t> msg;
  encode_stats_reply(1, m, &msg);
  const std::size_t count_at = kHeaderSize + 4 + 8 * kStatsFields;
  for (std::uint32_t n : {kMaxPools + 1, 0xFFFFFFFFu}) {
    auto bad = msg;
    store_le<std::uint32_t>(bad.data() + count_at, n);
    auto r = decode_stats_reply(payload_of(bad));
    ASSERT_FALSE(r) << n;
    EXPECT_NE(r.error().message.find("pool_count"), std::string::npos) << r.error().message;
  }
  auto more = msg;  // announces three pools, carries two
  store_le<std::uint32_t>(more.data() + count_at, 3);
  EXPECT_FALSE(decode_stats_reply(payload_of(more)));
  auto fewer = msg;  // announces one, carries two: trailing bytes
  store_le<std::uint32_t>(fewer.data() + count_at, 1);
  EXPECT_FALSE(decode_stats_reply(payload_of(fewer)));
  // A version-2 stats reply (no pool list) is refused.
  auto v2 = std::vector<std::uint8_t>(msg.begin(), msg.begin() + static_cast<std::ptrdiff_t>(count_at));
  EXPECT_FALSE(decode_stats_reply(payload_of(v2)));
}

TEST(ProtocolV3, EveryTruncationOfAStatsReplyIsRefused) {
  StatsReply m;
  m.pools.resize(3);
  std::vector<std::uint8_t> msg;
  encode_stats_reply(1, m, &msg);
  for (std::size_t n = 0; n + kHeaderSize < msg.size(); ++n) {
    EXPECT_FALSE(decode_stats_reply(payload_of(msg).first(n))) << n;
  }
}

TEST(ProtocolV3, HandlesNameTheirPool) {
  EXPECT_EQ(handle_pool(1), 0u);
  EXPECT_EQ(handle_pool((std::uint64_t{1} << kHandlePoolShift) + 1), 1u);
  EXPECT_EQ(handle_pool((std::uint64_t{15} << kHandlePoolShift) + 12345), 15u);
  EXPECT_EQ(handle_pool(~std::uint64_t{0}), 255u);
}

TEST(ProtocolV3, Version2FramesAreRefused) {
  std::vector<std::uint8_t> msg;
  encode_empty(1, MsgType::kStats, &msg);
  store_le<std::uint16_t>(msg.data() + 4, 2);
  EXPECT_FALSE(decode_header(msg));
}

}  // namespace
}  // namespace epk::shm
