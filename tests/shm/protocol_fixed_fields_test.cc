// The messages made only of fixed-width fields (docs/PROTOCOL.md: open_model reply, prefetch reply, open_stored and
// its reply, the tensors request), whose encoder and decoder are written from one layout table each: the bytes an
// encoder writes are the ones the page lays out (written out here by hand), the decoder reads them back, every cut
// is refused naming the message and the field it cuts, and a byte past the last field is refused.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "shm/protocol.h"
#include "tests/shm/payload_of.h"

namespace epk::shm {
namespace {

struct Case {
  const char* what;  // the message as errors name it
  std::uint16_t type;
  std::vector<std::uint8_t> msg;   // what the encoder wrote, header included
  std::vector<std::uint8_t> want;  // the payload, little-endian, as the page lays it out
  std::vector<std::pair<const char*, std::size_t>> fields;  // name and width, in wire order
  std::function<Status(std::span<const std::uint8_t>)> decode;
};

std::uint16_t reply_type(MsgType t) { return static_cast<std::uint16_t>(static_cast<std::uint16_t>(t) | kReplyBit); }

template <class Decode>
std::function<Status(std::span<const std::uint8_t>)> status_of(Decode decode) {
  return [decode](std::span<const std::uint8_t> p) -> Status {
    auto r = decode(p);
    if (!r) return r.error();
    return {};
  };
}

std::vector<Case> cases() {
  std::vector<Case> out;
  Case c;
  c = {"open_model reply", reply_type(MsgType::kOpenModel), {}, {0x04, 0x03, 0x02, 0x01, 0x09, 0, 0, 0},
       {{"model_id", 4}, {"tensor_count", 4}}, status_of(decode_open_model_reply)};
  encode_open_model_reply(5, {0x01020304, 9}, &c.msg);
  out.push_back(c);
  c = {"prefetch reply", reply_type(MsgType::kPrefetch), {}, {0xFE, 0xFF, 0, 0}, {{"queued", 4}},
       status_of(decode_prefetch_reply)};
  encode_prefetch_reply(5, {0xFFFE}, &c.msg);
  out.push_back(c);
  c = {"open_stored", static_cast<std::uint16_t>(MsgType::kOpenStored), {}, {7, 0, 0, 0, 2, 0, 0, 0},
       {{"model_id", 4}, {"device", 4}}, status_of(decode_open_stored)};
  encode_open_stored(5, {7, 2}, &c.msg);
  out.push_back(c);
  c = {"open_stored reply",
       reply_type(MsgType::kOpenStored),
       {},
       {0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, 1, 0, 0, 0},
       {{"tier_bytes", 8}, {"where", 4}},
       status_of(decode_open_stored_reply)};
  encode_open_stored_reply(5, {0x0102030405060708ull, 1}, &c.msg);
  out.push_back(c);
  c = {"tensors", static_cast<std::uint16_t>(MsgType::kTensors), {}, {3, 0, 0, 0, 0x2C, 0x01, 0, 0},
       {{"model_id", 4}, {"first", 4}}, status_of(decode_tensors)};
  encode_tensors(5, {3, 300}, &c.msg);
  out.push_back(c);
  return out;
}

using test::payload_of;

TEST(ProtocolFixedFields, EncodersWriteTheLayoutOfThePage) {
  for (const Case& c : cases()) {
    auto h = decode_header(c.msg);
    ASSERT_TRUE(h) << c.what << ": " << h.error().to_string();
    EXPECT_EQ(h->type, c.type) << c.what;
    EXPECT_EQ(h->request_id, 5u) << c.what;
    EXPECT_EQ(h->payload_size, c.want.size()) << c.what;
    const auto p = payload_of(c.msg);
    EXPECT_EQ(std::vector<std::uint8_t>(p.begin(), p.end()), c.want) << c.what;
  }
}

TEST(ProtocolFixedFields, DecodersReadTheFieldsBack) {
  std::vector<std::uint8_t> msg;
  encode_open_model_reply(1, {0x01020304, 9}, &msg);
  auto om = decode_open_model_reply(payload_of(msg));
  ASSERT_TRUE(om) << om.error().to_string();
  EXPECT_EQ(om->model_id, 0x01020304u);
  EXPECT_EQ(om->tensor_count, 9u);
  encode_prefetch_reply(1, {0xFFFE}, &msg);
  auto pf = decode_prefetch_reply(payload_of(msg));
  ASSERT_TRUE(pf) << pf.error().to_string();
  EXPECT_EQ(pf->queued, 0xFFFEu);
  encode_open_stored(1, {7, 2}, &msg);
  auto os = decode_open_stored(payload_of(msg));
  ASSERT_TRUE(os) << os.error().to_string();
  EXPECT_EQ(os->model_id, 7u);
  EXPECT_EQ(os->device, 2u);
  encode_open_stored_reply(1, {0x0102030405060708ull, 1}, &msg);
  auto osr = decode_open_stored_reply(payload_of(msg));
  ASSERT_TRUE(osr) << osr.error().to_string();
  EXPECT_EQ(osr->tier_bytes, 0x0102030405060708ull);
  EXPECT_EQ(osr->where, static_cast<std::uint32_t>(TierWhere::kHost));
  encode_tensors(1, {3, 300}, &msg);
  auto t = decode_tensors(payload_of(msg));
  ASSERT_TRUE(t) << t.error().to_string();
  EXPECT_EQ(t->model_id, 3u);
  EXPECT_EQ(t->first, 300u);
}

TEST(ProtocolFixedFields, EveryCutIsRefusedNamingTheFieldItCuts) {
  for (const Case& c : cases()) {
    const auto p = payload_of(c.msg);
    for (std::size_t n = 0; n < p.size(); ++n) {
      // The field the cut falls in: the first one that does not end within n bytes.
      std::size_t end = 0;
      const char* cut = nullptr;
      for (const auto& [name, width] : c.fields) {
        end += width;
        if (end > n) {
          cut = name;
          break;
        }
      }
      ASSERT_NE(cut, nullptr) << c.what << " cut at " << n;
      Status st = c.decode(p.first(n));
      ASSERT_FALSE(st) << c.what << " cut at " << n;
      const std::string& m = st.error().message;
      EXPECT_EQ(m.rfind(std::string(c.what) + ": ", 0), 0u) << m;
      EXPECT_NE(m.find("field '" + std::string(cut) + "'"), std::string::npos)
          << c.what << " cut at " << n << ": " << m;
    }
  }
}

TEST(ProtocolFixedFields, AByteAfterTheLastFieldIsRefused) {
  for (const Case& c : cases()) {
    const auto p = payload_of(c.msg);
    std::vector<std::uint8_t> longer(p.begin(), p.end());
    longer.push_back(0);
    Status st = c.decode(longer);
    ASSERT_FALSE(st) << c.what;
    EXPECT_NE(st.error().message.find(std::string(c.what) + ": 1 trailing bytes"), std::string::npos)
        << st.error().message;
  }
}

}  // namespace
}  // namespace epk::shm
