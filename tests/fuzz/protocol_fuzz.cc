// libFuzzer target: the epkd wire protocol decoders (shm/protocol.h). The input is one message: the 16-byte frame
// header, then the payload. Checked for every input:
//   - the fast decoders (acquire, release, acquire reply: the cache-hit path) agree with their field-by-field
//     reference decoders (*_checked) on whether the payload is valid and on every field they decode;
//   - a payload that decodes, encoded again, gives back the input byte for byte (the decoders accept one spelling
//     of each message: the encoder's).
#include <cstdint>
#include <cstring>
#include <vector>

#include "shm/protocol.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace epk::shm;
using epk::fuzz::violated;

std::span<const std::uint8_t> g_input;

void same_bytes(const std::vector<std::uint8_t>& encoded) {
  if (encoded.size() != g_input.size() || std::memcmp(encoded.data(), g_input.data(), encoded.size()) != 0)
    violated();
}

bool same(const AcquireRequest& a, const AcquireRequest& b) {
  return a.model_id == b.model_id && a.layout == b.layout && a.tensor == b.tensor && a.device == b.device;
}
bool same(const AcquireReply& a, const AcquireReply& b) {
  return a.handle == b.handle && a.pool_id == b.pool_id && a.dtype == b.dtype && a.offset == b.offset &&
         a.bytes == b.bytes && a.shape == b.shape && a.strides == b.strides && a.done_event == b.done_event &&
         a.status_ticket == b.status_ticket;
}
bool same(const ReleaseRequest& a, const ReleaseRequest& b) {
  return a.handle == b.handle && a.fence == b.fence && a.flags == b.flags && a.event == b.event;
}

// Decodes p with `decode`; when it succeeds, encodes the result with `encode` and compares with the input.
template <class Decode, class Encode>
void round_trip(std::uint32_t id, std::span<const std::uint8_t> p, Decode decode, Encode encode) {
  auto m = decode(p);
  if (!m) return;
  std::vector<std::uint8_t> out;
  encode(id, *m, &out);
  same_bytes(out);
}

void payload(const FrameHeader& h, std::span<const std::uint8_t> p) {
  const std::uint32_t id = h.request_id;
  switch (h.type) {
    case std::uint16_t(MsgType::kHello):
      return round_trip(id, p, [](auto q) { return decode_hello(q); }, encode_hello);
    case std::uint16_t(MsgType::kOpenModel):
      return round_trip(id, p, [](auto q) { return decode_open_model(q); }, encode_open_model);
    case std::uint16_t(MsgType::kAcquire): {
      AcquireRequest fast, checked;
      const bool ok_fast = bool(decode_acquire(p, &fast)), ok_checked = bool(decode_acquire_checked(p, &checked));
      if (ok_fast != ok_checked || (ok_fast && !same(fast, checked))) violated();
      return round_trip(id, p, [](auto q) { return decode_acquire(q); }, encode_acquire);
    }
    case std::uint16_t(MsgType::kPrefetch):
      return round_trip(id, p, [](auto q) { return decode_prefetch(q); }, encode_prefetch);
    case std::uint16_t(MsgType::kRelease): {
      auto fast = decode_release(p);
      auto checked = decode_release_checked(p);
      if (bool(fast) != bool(checked) || (fast && !same(*fast, *checked))) violated();
      return round_trip(id, p, [](auto q) { return decode_release(q); }, encode_release);
    }
    case std::uint16_t(MsgType::kStats):
    case std::uint16_t(MsgType::kClose):
    case std::uint16_t(MsgType::kModels):
      if (decode_empty(p, "request")) {
        std::vector<std::uint8_t> out;
        encode_empty(id, MsgType(h.type), &out);
        same_bytes(out);
      }
      return;
    case kReplyBit | std::uint16_t(MsgType::kHello):
      return round_trip(id, p, [](auto q) { return decode_hello_reply(q); }, encode_hello_reply);
    case kReplyBit | std::uint16_t(MsgType::kOpenModel):
      return round_trip(id, p, [](auto q) { return decode_open_model_reply(q); }, encode_open_model_reply);
    case kReplyBit | std::uint16_t(MsgType::kAcquire): {
      AcquireReply fast, checked;
      const bool ok_fast = bool(decode_acquire_reply(p, &fast));
      const bool ok_checked = bool(decode_acquire_reply_checked(p, &checked));
      if (ok_fast != ok_checked || (ok_fast && !same(fast, checked))) violated();
      return round_trip(id, p, [](auto q) { return decode_acquire_reply(q); }, encode_acquire_reply);
    }
    case kReplyBit | std::uint16_t(MsgType::kPrefetch):
      return round_trip(id, p, [](auto q) { return decode_prefetch_reply(q); }, encode_prefetch_reply);
    case kReplyBit | std::uint16_t(MsgType::kStats):
      return round_trip(id, p, [](auto q) { return decode_stats_reply(q); }, encode_stats_reply);
    case kReplyBit | std::uint16_t(MsgType::kModels):
      return round_trip(id, p, [](auto q) { return decode_models_reply(q); }, encode_models_reply);
    case std::uint16_t(MsgType::kError):
      return round_trip(id, p, [](auto q) { return decode_error(q); }, encode_error);
    default:
      return;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  g_input = {data, size};
  if (size < kHeaderSize) {
    (void)decode_header(g_input);
    return 0;
  }
  auto h = decode_header(g_input.first(kHeaderSize));
  if (!h) return 0;
  if (h->payload_size != size - kHeaderSize) return 0;  // a session reads exactly payload_size bytes
  if (h->version != kProtocolVersion) return 0;        // answered bad-version, never decoded
  payload(*h, g_input.subspan(kHeaderSize));
  return 0;
}
