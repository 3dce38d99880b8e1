#include "shm/protocol.h"

#include <gtest/gtest.h>

#include "codec/common/bytes.h"
#include "tests/shm/payload_of.h"

namespace epk::shm {
namespace {

using test::payload_of;

FrameHeader header_of(const std::vector<std::uint8_t>& msg) {
  auto h = decode_header(msg);
  EXPECT_TRUE(h) << h.error().to_string();
  EXPECT_EQ(h->payload_size, msg.size() - kHeaderSize);
  return *h;
}

TEST(Protocol, HeaderRoundTrip) {
  std::vector<std::uint8_t> msg;
  encode_acquire(77, {3, Layout::kDenseBF16, "layers.0.w"}, &msg);
  FrameHeader h = header_of(msg);
  EXPECT_EQ(h.type, static_cast<std::uint16_t>(MsgType::kAcquire));
  EXPECT_EQ(h.request_id, 77u);
  EXPECT_EQ(h.version, kProtocolVersion);
}

TEST(Protocol, RequestsRoundTrip) {
  std::vector<std::uint8_t> msg;
  encode_hello(1, {4242, 0}, &msg);
  auto hello = decode_hello(payload_of(msg));
  ASSERT_TRUE(hello);
  EXPECT_EQ(hello->client_pid, 4242u);

  encode_open_model(2, {"llama-7b"}, &msg);
  auto open = decode_open_model(payload_of(msg));
  ASSERT_TRUE(open);
  EXPECT_EQ(open->model, "llama-7b");

  encode_acquire(3, {5, Layout::kRowwiseI8, "a.b.c"}, &msg);
  auto acq = decode_acquire(payload_of(msg));
  ASSERT_TRUE(acq);
  EXPECT_EQ(acq->model_id, 5u);
  EXPECT_EQ(acq->layout, Layout::kRowwiseI8);
  EXPECT_EQ(acq->tensor, "a.b.c");

  encode_prefetch(4, {1, Layout::kDenseF16, {"x", "", "yy"}}, &msg);
  auto pre = decode_prefetch(payload_of(msg));
  ASSERT_TRUE(pre);
  EXPECT_EQ(pre->tensors, (std::vector<std::string>{"x", "", "yy"}));
  EXPECT_EQ(pre->layout, Layout::kDenseF16);

  encode_release(5, {0xFFFFFFFFFFFFull, FenceKind::kHostRelease, kReleaseNoReply}, &msg);
  auto rel = decode_release(payload_of(msg));
  ASSERT_TRUE(rel);
  EXPECT_EQ(rel->handle, 0xFFFFFFFFFFFFull);
  EXPECT_EQ(rel->flags, kReleaseNoReply);

  encode_empty(6, MsgType::kStats, &msg);
  EXPECT_TRUE(decode_empty(payload_of(msg), "stats"));
  EXPECT_EQ(header_of(msg).payload_size, 0u);
}

TEST(Protocol, RepliesRoundTrip) {
  std::vector<std::uint8_t> msg;
  HelloReply hr;
  hr.pools = {{0, PoolKind::kHost, -1, 1 << 20}, {1, PoolKind::kDevice, 3, 5ull << 32}};
  encode_hello_reply(1, hr, &msg);
  EXPECT_EQ(header_of(msg).type, static_cast<std::uint16_t>(MsgType::kHello) | kReplyBit);
  auto h = decode_hello_reply(payload_of(msg));
  ASSERT_TRUE(h);
  ASSERT_EQ(h->pools.size(), 2u);
  EXPECT_EQ(h->pools[1].device, 3);
  EXPECT_EQ(h->pools[1].size, 5ull << 32);
  EXPECT_EQ(h->pools[1].kind, PoolKind::kDevice);

  AcquireReply ar{9, 0, 9, 4096, 2 * 3 * 5 * 2, {2, 3, 5}, {15, 5, 1}};
  encode_acquire_reply(2, ar, &msg);
  auto a = decode_acquire_reply(payload_of(msg));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->handle, 9u);
  EXPECT_EQ(a->offset, 4096u);
  EXPECT_EQ(a->shape, ar.shape);
  EXPECT_EQ(a->strides, ar.strides);

  StatsReply sr;
  sr.budget_bytes = 1;
  sr.prefetches = 14;
  sr.evictions = 9;
  encode_stats_reply(3, sr, &msg);
  auto s = decode_stats_reply(payload_of(msg));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->budget_bytes, 1u);
  EXPECT_EQ(s->evictions, 9u);
  EXPECT_EQ(s->prefetches, 14u);

  encode_error(4, {WireStatus::kNoSpace, std::string(5000, 'x')}, &msg);
  auto e = decode_error(payload_of(msg));
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, WireStatus::kNoSpace);
  EXPECT_EQ(e->message.size(), kMaxErrorText);  // cut, still decodable
}

TEST(ProtocolMalformed, BadMagicVersionAndOversizedPayload) {
  std::vector<std::uint8_t> msg;
  encode_empty(1, MsgType::kStats, &msg);
  auto bad = msg;
  bad[0] ^= 1;
  EXPECT_FALSE(decode_header(bad));
  bad = msg;
  store_le<std::uint16_t>(bad.data() + 4, kProtocolVersion + 1);  // a version this side does not speak
  auto v = decode_header(bad);
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().code, ErrorCode::kUnsupported);
  bad = msg;
  store_le<std::uint32_t>(bad.data() + 12, kMaxPayload + 1);
  auto o = decode_header(bad);
  ASSERT_FALSE(o);
  EXPECT_NE(o.error().message.find("payload_size"), std::string::npos);
  store_le<std::uint32_t>(bad.data() + 12, kMaxPayload);
  EXPECT_TRUE(decode_header(bad));
  EXPECT_FALSE(decode_header(std::span<const std::uint8_t>(msg.data(), kHeaderSize - 1)));
}

TEST(ProtocolMalformed, EveryTruncationOfAnAcquireIsRefused) {
  std::vector<std::uint8_t> msg;
  encode_acquire(1, {2, Layout::kDenseBF16, "model.layers.17.self_attn.q_proj.weight"}, &msg);
  auto p = payload_of(msg);
  for (std::size_t n = 0; n < p.size(); ++n) {
    auto r = decode_acquire(p.first(n));
    EXPECT_FALSE(r) << "prefix of " << n << " bytes accepted";
  }
  EXPECT_TRUE(decode_acquire(p));
}

TEST(ProtocolMalformed, TrailingBytesAreRefused) {
  std::vector<std::uint8_t> msg;
  encode_release(1, {3, FenceKind::kHostRelease}, &msg);
  msg.push_back(0);
  auto r = decode_release(payload_of(msg));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("trailing"), std::string::npos);
  encode_empty(1, MsgType::kStats, &msg);
  msg.push_back(1);
  EXPECT_FALSE(decode_empty(payload_of(msg), "stats"));
}

TEST(ProtocolMalformed, StringLongerThanItsLimitOrThePayload) {
  // A name length above the field's limit.
  std::vector<std::uint8_t> p(4 + 4 + 2);
  store_le<std::uint32_t>(p.data(), 0);
  store_le<std::uint32_t>(p.data() + 4, 0);
  store_le<std::uint16_t>(p.data() + 8, static_cast<std::uint16_t>(kMaxTensorName + 1));
  p.resize(p.size() + kMaxTensorName + 1, 'a');
  auto r = decode_acquire(p);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("'tensor'"), std::string::npos);
  // A length within the limit but past the end of the payload.
  std::vector<std::uint8_t> q(4 + 4 + 2 + 3, 'b');
  store_le<std::uint32_t>(q.data(), 0);
  store_le<std::uint32_t>(q.data() + 4, 0);
  store_le<std::uint16_t>(q.data() + 8, 4);
  EXPECT_FALSE(decode_acquire(q));
}

TEST(ProtocolMalformed, UnknownLayoutFenceAndReservedBits) {
  std::vector<std::uint8_t> msg;
  encode_acquire(1, {0, Layout::kStored, "t"}, &msg);
  store_le<std::uint32_t>(msg.data() + kHeaderSize + 4, kLayoutCount);
  EXPECT_FALSE(decode_acquire(payload_of(msg)));
  encode_release(1, {0, FenceKind::kHostRelease}, &msg);
  store_le<std::uint32_t>(msg.data() + kHeaderSize + 8, 7);
  EXPECT_FALSE(decode_release(payload_of(msg)));
  encode_release(1, {0, FenceKind::kHostRelease}, &msg);
  store_le<std::uint32_t>(msg.data() + kHeaderSize + 12, 2);  // an unknown flag
  EXPECT_FALSE(decode_release(payload_of(msg)));
  encode_hello(1, {1, 0}, &msg);
  store_le<std::uint32_t>(msg.data() + kHeaderSize + 4, 1);
  EXPECT_FALSE(decode_hello(payload_of(msg)));
}

TEST(ProtocolMalformed, PrefetchCountsAreCheckedBeforeUse) {
  std::vector<std::uint8_t> p(16);  // model_id, layout, count, and (version 3) the device
  store_le<std::uint32_t>(p.data() + 8, kMaxPrefetch + 1);
  EXPECT_FALSE(decode_prefetch(p));
  store_le<std::uint32_t>(p.data() + 8, 200);  // within the limit, but 200 names cannot fit in 0 bytes
  auto r = decode_prefetch(p);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("count"), std::string::npos);
  store_le<std::uint32_t>(p.data() + 8, 0);
  auto ok = decode_prefetch(p);
  ASSERT_TRUE(ok);
  EXPECT_TRUE(ok->tensors.empty());
}

TEST(ProtocolMalformed, ReplyCountsAreChecked) {
  std::vector<std::uint8_t> msg;
  encode_acquire_reply(1, {1, 0, 9, 0, 4, {4}, {1}}, &msg);
  store_le<std::uint32_t>(msg.data() + kHeaderSize + 32, kMaxDims + 1);
  EXPECT_FALSE(decode_acquire_reply(payload_of(msg)));
  HelloReply hr;
  encode_hello_reply(1, hr, &msg);
  store_le<std::uint32_t>(msg.data() + kHeaderSize + 4, kMaxPools + 1);
  EXPECT_FALSE(decode_hello_reply(payload_of(msg)));
  store_le<std::uint32_t>(msg.data() + kHeaderSize + 4, 1);  // announces a pool it does not carry
  EXPECT_FALSE(decode_hello_reply(payload_of(msg)));
  encode_stats_reply(1, {}, &msg);
  store_le<std::uint32_t>(msg.data() + kHeaderSize, kStatsFields + 1);
  EXPECT_FALSE(decode_stats_reply(payload_of(msg)));
}

// Field by field, each field named in a failure.
void expect_same(const AcquireRequest& a, const AcquireRequest& b) {
  EXPECT_EQ(a.model_id, b.model_id);
  EXPECT_EQ(a.layout, b.layout);
  EXPECT_EQ(a.tensor, b.tensor);
  EXPECT_EQ(a.device, b.device);
  EXPECT_EQ(a.shard, b.shard);
}
void expect_same(const AcquireReply& a, const AcquireReply& b) {
  EXPECT_EQ(a.handle, b.handle);
  EXPECT_EQ(a.pool_id, b.pool_id);
  EXPECT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(a.offset, b.offset);
  EXPECT_EQ(a.bytes, b.bytes);
  EXPECT_EQ(a.shape, b.shape);
  EXPECT_EQ(a.strides, b.strides);
  EXPECT_EQ(a.done_event, b.done_event);
  EXPECT_EQ(a.status_ticket, b.status_ticket);
}

// The in-place decoder (libepk's hit path) gives what the value decoder gives, reusing the capacity it was handed:
// a 3-d reply after a 5-d one shrinks the vectors without reallocating them.
TEST(Protocol, AcquireReplyDecodesInPlaceKeepingCapacity) {
  std::vector<std::uint8_t> msg;
  AcquireReply into;
  into.shape.reserve(kMaxDims);
  into.strides.reserve(kMaxDims);
  const std::uint64_t* shape_data = into.shape.data();
  const std::int64_t* strides_data = into.strides.data();
  AcquireReply five{(3ull << kHandlePoolShift) | 77, 3, 11, 8192, 7 * 3 * 5 * 2 * 1 * 2, {7, 3, 5, 2, 1},
                    {30, 10, 2, 1, 1}, 5, 123456789};
  AcquireReply three{9, 0, 9, 4096, 2 * 3 * 5 * 2, {2, 3, 5}, {15, 5, 1}};
  for (const AcquireReply* want : {&five, &three}) {
    encode_acquire_reply(2, *want, &msg);
    ASSERT_TRUE(decode_acquire_reply(payload_of(msg), &into));
    auto ref = decode_acquire_reply(payload_of(msg));
    ASSERT_TRUE(ref);
    expect_same(into, *want);
    EXPECT_EQ(into.shape, ref->shape);
    EXPECT_EQ(into.strides, ref->strides);
    EXPECT_EQ(into.status_ticket, ref->status_ticket);
    EXPECT_EQ(into.shape.data(), shape_data);
    EXPECT_EQ(into.strides.data(), strides_data);
  }
}

TEST(ProtocolMalformed, InPlaceAcquireReplyRefusesWhatTheValueDecoderRefuses) {
  std::vector<std::uint8_t> msg;
  AcquireReply into;
  encode_acquire_reply(1, {1, 0, 9, 0, 4, {4}, {1}}, &msg);
  std::vector<std::uint8_t> bad = msg;
  store_le<std::uint32_t>(bad.data() + kHeaderSize + 32, kMaxDims + 1);
  EXPECT_FALSE(decode_acquire_reply(payload_of(bad), &into));
  bad = msg;
  store_le<std::uint32_t>(bad.data() + kHeaderSize + 36, 1);  // reserved
  EXPECT_FALSE(decode_acquire_reply(payload_of(bad), &into));
  for (std::size_t cut = 0; cut + kHeaderSize < msg.size(); ++cut) {
    std::span<const std::uint8_t> p = payload_of(msg).first(cut);
    EXPECT_FALSE(decode_acquire_reply(p, &into)) << "cut at " << cut;
  }
  bad = msg;
  bad.push_back(0);
  EXPECT_FALSE(decode_acquire_reply(payload_of(bad), &into));  // trailing byte
}

// The hit path's fast decoders against the field-by-field reference decoders (decode_*_checked): on valid messages
// of every size and on mutated ones (a byte changed, cut, or one appended), both accept or both refuse, and what they
// accept is the same.

// Mutations of one encoded message: itself, each single-byte change to a few values, each cut, one byte appended.
std::vector<std::vector<std::uint8_t>> mutations(const std::vector<std::uint8_t>& msg, std::uint32_t seed) {
  std::vector<std::vector<std::uint8_t>> out;
  std::vector<std::uint8_t> p(msg.begin() + kHeaderSize, msg.end());
  out.push_back(p);
  std::uint32_t x = seed;
  for (std::size_t i = 0; i < p.size(); ++i) {
    for (std::uint8_t v : {std::uint8_t{0}, std::uint8_t{1}, std::uint8_t{0xFF}}) {
      out.push_back(p);
      out.back()[i] = v;
    }
    x = x * 1664525u + 1013904223u;
    out.push_back(p);
    out.back()[i] ^= static_cast<std::uint8_t>(1u << (x >> 29));
  }
  for (std::size_t cut = 0; cut < p.size(); ++cut) out.emplace_back(p.begin(), p.begin() + cut);
  out.push_back(p);
  out.back().push_back(0);
  return out;
}

TEST(FastDecoders, AcquireMatchesTheReference) {
  std::vector<std::uint8_t> msg;
  std::uint32_t x = 7;
  for (std::size_t len : {0u, 1u, 15u, 16u, 39u, 255u, 1023u, 1024u}) {
    x = x * 1664525u + 1013904223u;
    AcquireRequest m{x, Layout::kRowwiseI8, std::string(len, static_cast<char>('a' + len % 26)), x >> 7};
    encode_acquire(3, m, &msg);
    int accepted = 0;
    for (const auto& p : mutations(msg, x)) {
      AcquireRequest fast, ref;
      fast.tensor = "left over from before";
      Status f = decode_acquire(p, &fast);
      Status r = decode_acquire_checked(p, &ref);
      ASSERT_EQ(static_cast<bool>(f), static_cast<bool>(r)) << "len " << len << " size " << p.size();
      if (f) {
        expect_same(fast, ref);
        ++accepted;
      }
    }
    EXPECT_GT(accepted, 1);  // the message itself and mutations of its free fields
  }
}

TEST(FastDecoders, ReleaseMatchesTheReference) {
  std::vector<std::uint8_t> msg;
  for (FenceKind fence : {FenceKind::kHostRelease, FenceKind::kCudaEvent}) {
    for (std::uint32_t flags : {0u, kReleaseNoReply}) {
      ReleaseRequest m{(5ull << kHandlePoolShift) | 0x1234567, fence, flags};
      for (std::size_t i = 0; i < m.event.size(); ++i) m.event[i] = static_cast<std::uint8_t>(i * 7);
      encode_release(9, m, &msg);
      for (const auto& p : mutations(msg, flags + 3)) {
        auto f = decode_release(p);
        auto r = decode_release_checked(p);
        ASSERT_EQ(static_cast<bool>(f), static_cast<bool>(r)) << "size " << p.size();
        if (!f) continue;
        EXPECT_EQ(f->handle, r->handle);
        EXPECT_EQ(f->fence, r->fence);
        EXPECT_EQ(f->flags, r->flags);
        EXPECT_EQ(f->event, r->event);
      }
    }
  }
}

TEST(FastDecoders, AcquireReplyMatchesTheReference) {
  std::vector<std::uint8_t> msg;
  std::uint32_t x = 11;
  for (std::uint32_t ndim = 0; ndim <= kMaxDims; ++ndim) {
    AcquireReply m;
    x = x * 1664525u + 1013904223u;
    m.handle = (static_cast<std::uint64_t>(x) << 20) | ndim;
    m.pool_id = x % 16;
    m.dtype = x % 13;
    m.offset = static_cast<std::uint64_t>(x) * 4096;
    m.bytes = x >> 3;
    for (std::uint32_t d = 0; d < ndim; ++d) {
      m.shape.push_back(d * 3 + 1);
      m.strides.push_back(-static_cast<std::int64_t>(d) + 5);
    }
    m.done_event = ndim % 2 == 0 ? kNoEvent : x % 512;
    m.status_ticket = ndim % 3 == 0 ? 0 : x;
    encode_acquire_reply(4, m, &msg);
    for (const auto& p : mutations(msg, x)) {
      AcquireReply fast, ref;
      fast.shape = {9, 9, 9, 9, 9, 9, 9, 9, 9};  // left over from before: must be replaced
      Status f = decode_acquire_reply(p, &fast);
      Status r = decode_acquire_reply_checked(p, &ref);
      ASSERT_EQ(static_cast<bool>(f), static_cast<bool>(r)) << "ndim " << ndim << " size " << p.size();
      if (f) expect_same(fast, ref);
    }
  }
}

// The hit path's encoders (sized once, fields stored in place) lay out exactly the bytes of protocol.h, built here
// field by field.
struct Bytes {
  std::vector<std::uint8_t> v;
  template <class T>
  Bytes& put(T x) {
    std::uint8_t b[sizeof(T)];
    store_le<T>(b, x);
    v.insert(v.end(), b, b + sizeof(T));
    return *this;
  }
  std::vector<std::uint8_t> frame(std::uint16_t type, std::uint32_t id) const {
    Bytes h;
    h.put(kWireMagic).put(kProtocolVersion).put(type).put(id).put(static_cast<std::uint32_t>(v.size()));
    h.v.insert(h.v.end(), v.begin(), v.end());
    return h.v;
  }
};

TEST(Protocol, HitPathEncodersGiveTheDocumentedBytes) {
  std::vector<std::uint8_t> msg(300, 0xAB);  // left over from a longer message: must be replaced, not appended to
  const std::string name = "model.layers.17.self_attn.q_proj.weight";
  encode_acquire(0x01020304, {77, Layout::kDenseBF16, name, 3}, &msg);
  Bytes a;
  a.put<std::uint32_t>(77).put(static_cast<std::uint32_t>(Layout::kDenseBF16));
  a.put(static_cast<std::uint16_t>(name.size()));
  a.v.insert(a.v.end(), name.begin(), name.end());
  a.put<std::uint32_t>(3);
  EXPECT_EQ(msg, a.frame(static_cast<std::uint16_t>(MsgType::kAcquire), 0x01020304));

  ReleaseRequest rel{0x0500000000ABCDEFull, FenceKind::kHostRelease, kReleaseNoReply};
  encode_release(8, rel, &msg);
  Bytes r;
  r.put(rel.handle).put<std::uint32_t>(0).put<std::uint32_t>(kReleaseNoReply);
  EXPECT_EQ(msg, r.frame(static_cast<std::uint16_t>(MsgType::kRelease), 8));
  rel.fence = FenceKind::kCudaEvent;
  rel.flags = 0;
  for (std::size_t i = 0; i < rel.event.size(); ++i) rel.event[i] = static_cast<std::uint8_t>(255 - i);
  encode_release(9, rel, &msg);
  Bytes re;
  re.put(rel.handle).put<std::uint32_t>(1).put<std::uint32_t>(0);
  re.v.insert(re.v.end(), rel.event.begin(), rel.event.end());
  EXPECT_EQ(msg, re.frame(static_cast<std::uint16_t>(MsgType::kRelease), 9));

  AcquireReply ar{(2ull << kHandlePoolShift) | 5, 2, 11, 1ull << 33, 2 * 3 * 5 * 2, {2, 3, 5}, {15, 5, -1}, 17, 99};
  encode_acquire_reply(10, ar, &msg);
  Bytes ab;
  ab.put(ar.handle).put(ar.pool_id).put(ar.dtype).put(ar.offset).put(ar.bytes);
  ab.put<std::uint32_t>(3).put<std::uint32_t>(0);
  for (auto d : ar.shape) ab.put(d);
  for (auto st : ar.strides) ab.put(st);
  ab.put(ar.done_event).put<std::uint32_t>(0).put(ar.status_ticket);
  EXPECT_EQ(msg, ab.frame(static_cast<std::uint16_t>(MsgType::kAcquire) | kReplyBit, 10));
}

TEST(ProtocolMalformed, RandomBytesNeverCrashTheDecoders) {
  std::uint64_t x = 0x1234567;
  std::vector<std::uint8_t> p;
  for (int round = 0; round < 2000; ++round) {
    p.resize(static_cast<std::size_t>(round % 97));
    for (auto& b : p) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      b = static_cast<std::uint8_t>(x >> 56);
      if (round % 3 == 0) b &= 0x03;  // small values make lengths and counts plausible
    }
    (void)decode_hello(p);
    (void)decode_open_model(p);
    (void)decode_acquire(p);
    (void)decode_prefetch(p);
    (void)decode_release(p);
    (void)decode_hello_reply(p);
    (void)decode_acquire_reply(p);
    (void)decode_stats_reply(p);
    (void)decode_error(p);
    (void)decode_header(p);
  }
  SUCCEED();
}

TEST(Protocol, ModelsReplyRoundTrip) {
  ModelsReply m;
  m.total = 2;
  m.models = {{"llama", 291, 7, 123456789ull, 2, 3ull << 30, 5ull << 32}, {"", 0, 0, 0, 0}};
  std::vector<std::uint8_t> msg;
  encode_models_reply(9, m, &msg);
  EXPECT_EQ(header_of(msg).type, static_cast<std::uint16_t>(MsgType::kModels) | kReplyBit);
  auto r = decode_models_reply(payload_of(msg));
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->total, 2u);
  ASSERT_EQ(r->models.size(), 2u);
  EXPECT_EQ(r->models[0].name, "llama");
  EXPECT_EQ(r->models[0].tensors, 291u);
  EXPECT_EQ(r->models[0].cached_slots, 7u);
  EXPECT_EQ(r->models[0].cached_bytes, 123456789ull);
  EXPECT_EQ(r->models[0].pinned_slots, 2u);
  EXPECT_EQ(r->models[0].tier_device_bytes, 3ull << 30);  // version 5
  EXPECT_EQ(r->models[0].tier_host_bytes, 5ull << 32);
  EXPECT_EQ(r->models[1].name, "");
  EXPECT_EQ(r->models[1].tier_host_bytes, 0u);
}

TEST(Protocol, ModelsReplyKeepsToOneMessage) {
  ModelsReply m;
  m.total = 1000;
  m.models.resize(1000, ModelInfo{std::string(kMaxModelName, 'x'), 1, 2, 3, 4});
  std::vector<std::uint8_t> msg;
  encode_models_reply(1, m, &msg);
  ASSERT_LE(msg.size(), kMaxMessage);
  auto r = decode_models_reply(payload_of(msg));
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->total, 1000u);
  EXPECT_GT(r->models.size(), 100u);
  EXPECT_LT(r->models.size(), 1000u);
}

TEST(Protocol, TensorsRoundTripAndPages) {
  std::vector<std::uint8_t> msg;
  encode_tensors(4, {7, 300}, &msg);
  auto q = decode_tensors(payload_of(msg));
  ASSERT_TRUE(q) << q.error().to_string();
  EXPECT_EQ(q->model_id, 7u);
  EXPECT_EQ(q->first, 300u);
  TensorsReply m;
  m.total = 3;
  m.tensors = {{"model.layers.0.mlp.up_proj.weight", 13, "lattice-rans", {14336, 4096}, 29360128},
               {"norm", 6, "raw", {5}, 20},
               {"", 0, "", {}, 0}};
  encode_tensors_reply(5, m, &msg);
  EXPECT_EQ(header_of(msg).type, static_cast<std::uint16_t>(MsgType::kTensors) | kReplyBit);
  auto r = decode_tensors_reply(payload_of(msg));
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->total, 3u);
  EXPECT_EQ(r->tensors, m.tensors);
  // Names at their limit: one message holds some, the total says how many more to ask for.
  m.total = 1000;
  m.tensors.assign(1000, TensorInfo{std::string(kMaxTensorName, 'x'), 1, "lattice-rans", {1, 2, 3, 4, 5, 6, 7, 8}, 9});
  encode_tensors_reply(6, m, &msg);
  ASSERT_LE(msg.size(), kMaxMessage);
  r = decode_tensors_reply(payload_of(msg));
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_GT(r->tensors.size(), 10u);
  EXPECT_LT(r->tensors.size(), 1000u);
  EXPECT_EQ(r->tensors.back(), m.tensors.back());
}

TEST(ProtocolMalformed, TensorsReplyBadCountOrRank) {
  std::vector<std::uint8_t> p(8);
  store_le<std::uint32_t>(p.data(), 1);
  store_le<std::uint32_t>(p.data() + 4, 2);  // more than total
  EXPECT_FALSE(decode_tensors_reply(p));
  TensorsReply m;
  m.total = 1;
  m.tensors = {{"t", 1, "raw", {2, 3}, 24}};
  std::vector<std::uint8_t> msg;
  encode_tensors_reply(1, m, &msg);
  std::vector<std::uint8_t> bad(payload_of(msg).begin(), payload_of(msg).end());
  // ndim sits after total, count, the name (2 + 1 bytes), dtype and the encoding (2 + 3 bytes).
  store_le<std::uint32_t>(bad.data() + 8 + 3 + 4 + 5, kMaxDims + 1);
  auto r = decode_tensors_reply(bad);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("ndim"), std::string::npos) << r.error().message;
  EXPECT_FALSE(decode_tensors(std::vector<std::uint8_t>(7)));  // truncated request
}

TEST(ProtocolMalformed, ModelsReplyCountBeyondTotalOrBytes) {
  std::vector<std::uint8_t> p(8);
  store_le<std::uint32_t>(p.data(), 1);
  store_le<std::uint32_t>(p.data() + 4, 2);  // more than total
  EXPECT_FALSE(decode_models_reply(p));
  store_le<std::uint32_t>(p.data(), 0xFFFFFFFFu);
  store_le<std::uint32_t>(p.data() + 4, 0xFFFFFFFFu);  // more than the bytes could hold
  EXPECT_FALSE(decode_models_reply(p));
  ModelsReply m;
  m.total = 1;
  m.models = {{"abc", 1, 2, 3, 4}};
  std::vector<std::uint8_t> msg;
  encode_models_reply(1, m, &msg);
  auto pl = payload_of(msg);
  for (std::size_t n = 0; n < pl.size(); ++n) EXPECT_FALSE(decode_models_reply(pl.first(n))) << n;
}

TEST(Layout, NamesRoundTrip) {
  for (std::uint32_t c = 0; c < kLayoutCount; ++c) {
    auto l = static_cast<Layout>(c);
    EXPECT_EQ(layout_from_name(layout_name(l)), l);
  }
  EXPECT_FALSE(layout_from_name("dense:bf17"));
  EXPECT_FALSE(layout_from_code(kLayoutCount));
}

}  // namespace
}  // namespace epk::shm
