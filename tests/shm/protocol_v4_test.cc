// Protocol version 4 (early acquire replies): the hello reply's status table length and the acquire reply's status
// ticket, their bounds, and version 3 frames refused.
#include <gtest/gtest.h>

#include "codec/common/bytes.h"
#include "shm/protocol.h"
#include "tests/shm/payload_of.h"

namespace epk::shm {
namespace {

using test::payload_of;

TEST(ProtocolV4, HelloReplyCarriesTheStatusTableLength) {
  HelloReply m;
  m.pools.push_back({0, PoolKind::kDevice, 0, 1 << 20});
  m.events.resize(3);
  m.events[2][63] = 9;
  m.status_entries = 65536;
  std::vector<std::uint8_t> msg;
  encode_hello_reply(1, m, &msg);
  EXPECT_EQ(load_le<std::uint32_t>(msg.data() + msg.size() - 4), 65536u);
  auto r = decode_hello_reply(payload_of(msg));
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->status_entries, 65536u);
  EXPECT_EQ(r->events.size(), 3u);
  EXPECT_EQ(r->events[2][63], 9);
}

TEST(ProtocolV4, HelloReplyStatusTableLengthIsBounded) {
  HelloReply m;
  m.status_entries = 5;
  std::vector<std::uint8_t> msg;
  encode_hello_reply(1, m, &msg);
  store_le<std::uint32_t>(msg.data() + msg.size() - 4, kMaxStatusEntries + 1);
  auto r = decode_hello_reply(payload_of(msg));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("status_entries"), std::string::npos) << r.error().message;
  // A version 3 hello reply (no status field) is refused.
  std::vector<std::uint8_t> cut(msg.begin(), msg.end() - 4);
  EXPECT_FALSE(decode_hello_reply(payload_of(cut)));
}

TEST(ProtocolV4, AcquireReplyCarriesTheTicket) {
  AcquireReply m;
  m.handle = 77;
  m.bytes = 4096;
  m.shape = {32, 64};
  m.strides = {64, 1};
  m.done_event = 5;
  m.status_ticket = 0x0123456789ABCDEFull;
  std::vector<std::uint8_t> msg;
  encode_acquire_reply(2, m, &msg);
  EXPECT_EQ(load_le<std::uint64_t>(msg.data() + msg.size() - 8), 0x0123456789ABCDEFull);
  auto r = decode_acquire_reply(payload_of(msg));
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->status_ticket, 0x0123456789ABCDEFull);
  EXPECT_EQ(r->done_event, 5u);
  m.status_ticket = kNoTicket;
  encode_acquire_reply(2, m, &msg);
  r = decode_acquire_reply(payload_of(msg));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status_ticket, kNoTicket);
}

TEST(ProtocolV4, EveryTruncationOfAnAcquireReplyIsRefused) {
  AcquireReply m;
  m.shape = {3, 5, 7};
  m.strides = {35, 7, 1};
  m.status_ticket = 3;
  std::vector<std::uint8_t> msg;
  encode_acquire_reply(2, m, &msg);
  const auto p = payload_of(msg);
  for (std::size_t n = 0; n < p.size(); ++n) EXPECT_FALSE(decode_acquire_reply(p.first(n))) << n;
  std::vector<std::uint8_t> longer(p.begin(), p.end());
  longer.push_back(0);
  EXPECT_FALSE(decode_acquire_reply(longer));
}

// Version 5 (the open_stored reply's `where`, the pools' host-tier figures) refuses the frames of every earlier one.
TEST(ProtocolV4, EarlierVersionsFramesAreRefused) {
  EXPECT_EQ(kProtocolVersion, 5);
  for (std::uint16_t v : {3, 4}) {
    std::vector<std::uint8_t> msg;
    encode_empty(1, MsgType::kStats, &msg);
    store_le<std::uint16_t>(msg.data() + 4, v);
    EXPECT_FALSE(decode_header(msg)) << v;
  }
}

}  // namespace
}  // namespace epk::shm
