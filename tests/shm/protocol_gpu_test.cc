// Protocol version 2: the fields the GPU path appended (hello's event ring, acquire's done_event, release's event
// handle, stats' resident_bytes), round trips and malformed cases.
#include <gtest/gtest.h>

#include "codec/common/bytes.h"
#include "shm/protocol.h"
#include "tests/shm/payload_of.h"

namespace epk::shm {
namespace {

using test::payload_of;

IpcEventHandle handle_with(std::uint8_t seed) {
  IpcEventHandle h;
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = static_cast<std::uint8_t>(seed * 31 + i * 7);
  return h;
}

TEST(ProtocolV2, HelloReplyCarriesTheEventRing) {
  HelloReply m;
  m.pools.push_back({0, PoolKind::kDevice, 3, std::uint64_t{1} << 33});
  for (std::uint8_t i = 0; i < 5; ++i) m.events.push_back(handle_with(i));
  std::vector<std::uint8_t> msg;
  encode_hello_reply(7, m, &msg);
  auto r = decode_hello_reply(payload_of(msg));
  ASSERT_TRUE(r) << r.error().to_string();
  ASSERT_EQ(r->pools.size(), 1u);
  EXPECT_EQ(r->pools[0].kind, PoolKind::kDevice);
  EXPECT_EQ(r->pools[0].device, 3);
  ASSERT_EQ(r->events.size(), 5u);
  EXPECT_EQ(r->events[4], handle_with(4));
}

TEST(ProtocolV2, HostHelloHasAnEmptyRing) {
  HelloReply m;
  m.pools.push_back({0, PoolKind::kHost, -1, 4096});
  std::vector<std::uint8_t> msg;
  encode_hello_reply(1, m, &msg);
  auto r = decode_hello_reply(payload_of(msg));
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->events.empty());
}

TEST(ProtocolV2, EventCountBeyondTheLimitIsRefusedBeforeUse) {
  HelloReply m;
  std::vector<std::uint8_t> msg;
  encode_hello_reply(1, m, &msg);
  // With no events the payload ends with u32 event_count then (version 4) u32 status_entries: claim kMaxEvents + 1
  // (and far more) events with no bytes behind them.
  for (std::uint32_t n : {kMaxEvents + 1, 0xFFFFFFFFu}) {
    auto bad = msg;
    store_le<std::uint32_t>(bad.data() + bad.size() - 8, n);
    auto r = decode_hello_reply(payload_of(bad));
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().message.find("event_count"), std::string::npos) << r.error().message;
  }
}

TEST(ProtocolV2, EveryTruncationOfTheRingIsRefused) {
  HelloReply m;
  m.events.push_back(handle_with(1));
  m.events.push_back(handle_with(2));
  std::vector<std::uint8_t> msg;
  encode_hello_reply(1, m, &msg);
  auto p = payload_of(msg);
  for (std::size_t n = 0; n < p.size(); ++n) EXPECT_FALSE(decode_hello_reply(p.first(n))) << n;
  EXPECT_TRUE(decode_hello_reply(p));
}

TEST(ProtocolV2, AcquireReplyDoneEvent) {
  AcquireReply m;
  m.handle = 99;
  m.shape = {10240, 3840};
  m.strides = {3840, 1};
  m.done_event = 17;
  std::vector<std::uint8_t> msg;
  encode_acquire_reply(3, m, &msg);
  auto r = decode_acquire_reply(payload_of(msg));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->done_event, 17u);
  m.done_event = kNoEvent;
  encode_acquire_reply(3, m, &msg);
  r = decode_acquire_reply(payload_of(msg));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->done_event, kNoEvent);
  // The reserved word after done_event (before version 4's u64 status_ticket) must be zero; any truncation is refused.
  auto bad = msg;
  store_le<std::uint32_t>(bad.data() + bad.size() - 12, 1);
  EXPECT_FALSE(decode_acquire_reply(payload_of(bad)));
  auto p = payload_of(msg);
  for (std::size_t n = 0; n < p.size(); ++n) EXPECT_FALSE(decode_acquire_reply(p.first(n))) << n;
}

TEST(ProtocolV2, ReleaseWithACudaEventCarriesItsHandle) {
  ReleaseRequest m{42, FenceKind::kCudaEvent, kReleaseNoReply, handle_with(9)};
  std::vector<std::uint8_t> msg;
  encode_release(5, m, &msg);
  EXPECT_EQ(msg.size(), kHeaderSize + 16 + kIpcEventHandleBytes);
  auto r = decode_release(payload_of(msg));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->fence, FenceKind::kCudaEvent);
  EXPECT_EQ(r->event, handle_with(9));
  auto p = payload_of(msg);
  for (std::size_t n = 0; n < p.size(); ++n) EXPECT_FALSE(decode_release(p.first(n))) << n;
}

TEST(ProtocolV2, HostReleaseHasNoHandleAndRefusesOne) {
  ReleaseRequest m{42, FenceKind::kHostRelease, 0, handle_with(3)};
  std::vector<std::uint8_t> msg;
  encode_release(5, m, &msg);
  EXPECT_EQ(msg.size(), kHeaderSize + 16);  // the handle is not sent for a host fence
  // A host release followed by 64 bytes is trailing garbage.
  auto bad = msg;
  bad.resize(bad.size() + kIpcEventHandleBytes, 0xAB);
  store_le<std::uint32_t>(bad.data() + 12, 16 + kIpcEventHandleBytes);
  EXPECT_FALSE(decode_release(payload_of(bad)));
}

TEST(ProtocolV2, StatsCarryResidentBytes) {
  StatsReply m;
  m.prefetches = 3;
  m.resident_bytes = (std::uint64_t{1} << 40) + 5;
  std::vector<std::uint8_t> msg;
  encode_stats_reply(1, m, &msg);
  auto r = decode_stats_reply(payload_of(msg));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->prefetches, 3u);
  EXPECT_EQ(r->resident_bytes, m.resident_bytes);
  auto bad = msg;
  store_le<std::uint32_t>(bad.data() + kHeaderSize, kStatsFields - 1);  // a version-1 stats reply
  EXPECT_FALSE(decode_stats_reply(payload_of(bad)));
}

TEST(ProtocolV2, Version1FramesAreRefused) {
  std::vector<std::uint8_t> msg;
  encode_empty(1, MsgType::kStats, &msg);
  store_le<std::uint16_t>(msg.data() + 4, 1);
  auto h = decode_header(msg);
  ASSERT_FALSE(h);
  EXPECT_EQ(h.error().code, ErrorCode::kUnsupported);
}

}  // namespace
}  // namespace epk::shm
