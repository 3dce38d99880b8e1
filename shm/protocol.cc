#include "shm/protocol.h"

#include <algorithm>
#include <cstring>

#include "codec/common/bytes.h"
#include "shm/wire_codec.h"

namespace epk::shm {
namespace {

using namespace wire;  // NOLINT


Result<Layout> read_layout(Reader& r) {
  EPK_TRY_ASSIGN(std::uint32_t code, r.get<std::uint32_t>("layout"));
  auto l = layout_from_code(code);
  if (!l) return r.bad("layout", "value " + std::to_string(code) + " is not a known layout");
  return *l;
}

// The optional shard block (docs/PROTOCOL.md, acquire): written only for a shard, read when bytes are left after the device.
constexpr std::size_t kShardBlock = 4 + 4 + 8 + 8;

template <class W>
void put_shard(W& w, const ShardSpec& s) {
  if (s.whole()) return;
  w.put(static_cast<std::uint32_t>(s.dim));
  w.put(static_cast<std::uint32_t>(s.form));
  w.put(s.a);
  w.put(s.b);
}

Status read_shard(Reader& r, ShardSpec* out) {
  *out = ShardSpec{};
  if (r.left() == 0) return {};
  EPK_TRY_ASSIGN(std::uint32_t dim, r.get<std::uint32_t>("shard dim"));
  EPK_TRY_ASSIGN(std::uint32_t form, r.get<std::uint32_t>("shard form"));
  if (dim != static_cast<std::uint32_t>(ShardDim::kRows) && dim != static_cast<std::uint32_t>(ShardDim::kCols)) {
    return r.bad("shard dim", std::to_string(dim) + " is neither rows (1) nor cols (2)");
  }
  if (form != static_cast<std::uint32_t>(ShardForm::kRange) && form != static_cast<std::uint32_t>(ShardForm::kSplit)) {
    return r.bad("shard form", std::to_string(form) + " is neither range (0) nor split (1)");
  }
  out->dim = static_cast<ShardDim>(dim);
  out->form = static_cast<ShardForm>(form);
  EPK_TRY_ASSIGN(out->a, r.get<std::uint64_t>("shard a"));
  EPK_TRY_ASSIGN(out->b, r.get<std::uint64_t>("shard b"));
  return {};
}

constexpr auto kOpenModelReplyLayout =
    plain_layout("open_model reply", Field{"model_id", &OpenModelReply::model_id},
                 Field{"tensor_count", &OpenModelReply::tensor_count});
constexpr auto kPrefetchReplyLayout = plain_layout("prefetch reply", Field{"queued", &PrefetchReply::queued});

}  // namespace

const char* msg_type_name(std::uint16_t type) {
  switch (static_cast<MsgType>(type & ~kReplyBit)) {
    case MsgType::kHello: return "hello";
    case MsgType::kOpenModel: return "open_model";
    case MsgType::kAcquire: return "acquire";
    case MsgType::kPrefetch: return "prefetch";
    case MsgType::kRelease: return "release";
    case MsgType::kStats: return "stats";
    case MsgType::kClose: return "close";
    case MsgType::kModels: return "models";
    case MsgType::kOpenStored: return "open_stored";
    case MsgType::kTensors: return "tensors";
    default: break;
  }
  return type == static_cast<std::uint16_t>(MsgType::kError) ? "error" : "unknown";
}

const char* wire_status_name(WireStatus s) {
  switch (s) {
    case WireStatus::kBadMessage: return "bad-message";
    case WireStatus::kBadVersion: return "bad-version";
    case WireStatus::kNotFound: return "not-found";
    case WireStatus::kUnsupported: return "unsupported";
    case WireStatus::kNoSpace: return "no-space";
    case WireStatus::kDecodeFailed: return "decode-failed";
    case WireStatus::kShuttingDown: return "shutting-down";
    case WireStatus::kInternal: return "internal";
    case WireStatus::kDenied: return "denied";
    case WireStatus::kOverQuota: return "over-quota";
    case WireStatus::kModelGone: return "model-gone";
    case WireStatus::kInvalidArgument: return "invalid-argument";
  }
  return "unknown";
}

Result<FrameHeader> decode_header(std::span<const std::uint8_t> bytes) {
  if (bytes.size() < kHeaderSize) {
    return make_error(ErrorCode::kBadInput, "frame header: " + std::to_string(bytes.size()) + " bytes, need 16");
  }
  std::uint32_t magic = load_le<std::uint32_t>(bytes.data());
  if (magic != kWireMagic) return make_error(ErrorCode::kBadInput, "frame header: field 'magic' is not epk's");
  FrameHeader h;
  h.version = load_le<std::uint16_t>(bytes.data() + 4);
  h.type = load_le<std::uint16_t>(bytes.data() + 6);
  h.request_id = load_le<std::uint32_t>(bytes.data() + 8);
  h.payload_size = load_le<std::uint32_t>(bytes.data() + 12);
  if (h.version != kProtocolVersion) {
    return make_error(ErrorCode::kUnsupported, "frame header: field 'version' is " + std::to_string(h.version) +
                                                   ", this daemon speaks " + std::to_string(kProtocolVersion));
  }
  if (h.payload_size > kMaxPayload) {
    return make_error(ErrorCode::kBadInput, "frame header: field 'payload_size' " + std::to_string(h.payload_size) +
                                                " exceeds the maximum " + std::to_string(kMaxPayload));
  }
  return h;
}

void encode_header(const FrameHeader& h, std::uint8_t* out) {
  store_le<std::uint32_t>(out, kWireMagic);
  store_le<std::uint16_t>(out + 4, h.version);
  store_le<std::uint16_t>(out + 6, h.type);
  store_le<std::uint32_t>(out + 8, h.request_id);
  store_le<std::uint32_t>(out + 12, h.payload_size);
}

void encode_hello(std::uint32_t id, const HelloRequest& m, std::vector<std::uint8_t>* out) {
  Writer w(out, id, static_cast<std::uint16_t>(MsgType::kHello));
  w.put(m.client_pid);
  w.put(m.flags);
}

void encode_open_model(std::uint32_t id, const OpenModelRequest& m, std::vector<std::uint8_t>* out) {
  Writer w(out, id, static_cast<std::uint16_t>(MsgType::kOpenModel));
  w.put_str(m.model, kMaxModelName);
}

void encode_acquire(std::uint32_t id, const AcquireRequest& m, std::vector<std::uint8_t>* out) {
  const std::size_t n = std::min(m.tensor.size(), kMaxTensorName);
  SizedWriter w(out, id, static_cast<std::uint16_t>(MsgType::kAcquire),
                4 + 4 + 2 + n + 4 + (m.shard.whole() ? 0 : kShardBlock));
  w.put(m.model_id);
  w.put(static_cast<std::uint32_t>(m.layout));
  w.put(static_cast<std::uint16_t>(n));
  w.put_bytes(m.tensor.data(), n);
  w.put(m.device);
  put_shard(w, m.shard);
}

void encode_prefetch(std::uint32_t id, const PrefetchRequest& m, std::vector<std::uint8_t>* out) {
  Writer w(out, id, static_cast<std::uint16_t>(MsgType::kPrefetch));
  w.put(m.model_id);
  w.put(static_cast<std::uint32_t>(m.layout));
  auto count = static_cast<std::uint32_t>(std::min<std::size_t>(m.tensors.size(), kMaxPrefetch));
  w.put(count);
  for (std::uint32_t i = 0; i < count; ++i) w.put_str(m.tensors[i], kMaxTensorName);
  w.put(m.device);
  put_shard(w, m.shard);
}

void encode_release(std::uint32_t id, const ReleaseRequest& m, std::vector<std::uint8_t>* out) {
  const bool event = m.fence == FenceKind::kCudaEvent;
  SizedWriter w(out, id, static_cast<std::uint16_t>(MsgType::kRelease), 8 + 4 + 4 + (event ? m.event.size() : 0));
  w.put(m.handle);
  w.put(static_cast<std::uint32_t>(m.fence));
  w.put(m.flags);
  if (event) w.put_bytes(m.event.data(), m.event.size());
}

void encode_empty(std::uint32_t id, MsgType type, std::vector<std::uint8_t>* out) {
  Writer w(out, id, static_cast<std::uint16_t>(type));
}

void encode_hello_reply(std::uint32_t id, const HelloReply& m, std::vector<std::uint8_t>* out) {
  Writer w(out, id, reply(MsgType::kHello));
  w.put(m.server_version);
  w.put(static_cast<std::uint32_t>(m.pools.size()));
  for (const PoolInfo& p : m.pools) {
    w.put(p.pool_id);
    w.put(static_cast<std::uint32_t>(p.kind));
    w.put(p.device);
    w.put<std::uint32_t>(0);
    w.put(p.size);
  }
  const std::size_t events = std::min<std::size_t>(m.events.size(), kMaxEvents);
  w.put(static_cast<std::uint32_t>(events));
  for (std::size_t i = 0; i < events; ++i) {
    for (std::uint8_t b : m.events[i]) w.put(b);
  }
  w.put(m.status_entries);
}

void encode_open_model_reply(std::uint32_t id, const OpenModelReply& m, std::vector<std::uint8_t>* out) {
  encode_plain(id, reply(MsgType::kOpenModel), m, kOpenModelReplyLayout, out);
}

void encode_acquire_reply(std::uint32_t id, const AcquireReply& m, std::vector<std::uint8_t>* out) {
  SizedWriter w(out, id, reply(MsgType::kAcquire),
                8 + 4 + 4 + 8 + 8 + 4 + 4 + 8 * (m.shape.size() + m.strides.size()) + 4 + 4 + 8);
  w.put(m.handle);
  w.put(m.pool_id);
  w.put(m.dtype);
  w.put(m.offset);
  w.put(m.bytes);
  w.put(static_cast<std::uint32_t>(m.shape.size()));
  w.put<std::uint32_t>(0);
  for (std::uint64_t d : m.shape) w.put(d);
  for (std::int64_t s : m.strides) w.put(s);
  w.put(m.done_event);
  w.put<std::uint32_t>(0);
  w.put(m.status_ticket);
}

void encode_prefetch_reply(std::uint32_t id, const PrefetchReply& m, std::vector<std::uint8_t>* out) {
  encode_plain(id, reply(MsgType::kPrefetch), m, kPrefetchReplyLayout, out);
}

void encode_error(std::uint32_t id, const ErrorReply& m, std::vector<std::uint8_t>* out) {
  Writer w(out, id, static_cast<std::uint16_t>(MsgType::kError));
  w.put(static_cast<std::uint32_t>(m.status));
  w.put_str(m.message, kMaxErrorText);
}

Result<HelloRequest> decode_hello(std::span<const std::uint8_t> p) {
  Reader r(p, "hello");
  HelloRequest m;
  EPK_TRY_ASSIGN(m.client_pid, r.get<std::uint32_t>("client_pid"));
  EPK_TRY_ASSIGN(m.flags, r.get<std::uint32_t>("flags"));
  if (m.flags != 0) return r.bad("flags", "has unknown bits set");
  EPK_TRY(r.finish());
  return m;
}

Result<OpenModelRequest> decode_open_model(std::span<const std::uint8_t> p) {
  Reader r(p, "open_model");
  OpenModelRequest m;
  EPK_TRY_ASSIGN(m.model, r.get_str("model", kMaxModelName));
  EPK_TRY(r.finish());
  return m;
}

Result<AcquireRequest> decode_acquire(std::span<const std::uint8_t> p) {
  AcquireRequest m;
  EPK_TRY(decode_acquire(p, &m));
  return m;
}

// The hit path's decoders (an acquire and a release per cache hit) read a well-formed message with one size check
// and direct loads; anything else (and every error message) goes through the field-by-field Reader path, which is
// also the reference the tests hold the fast path to (tests/shm/protocol_test.cc, "FastDecoders").
Status decode_acquire(std::span<const std::uint8_t> p, AcquireRequest* into) {
  constexpr std::size_t kFixed = 4 + 4 + 2 + 4;  // model_id, layout, tensor length, device
  if (p.size() >= kFixed) {
    const std::size_t n = load_le<std::uint16_t>(p.data() + 8);
    auto layout = layout_from_code(load_le<std::uint32_t>(p.data() + 4));
    if (n <= kMaxTensorName && p.size() == kFixed + n && layout) {
      into->model_id = load_le<std::uint32_t>(p.data());
      into->layout = *layout;
      into->tensor.assign(reinterpret_cast<const char*>(p.data() + 10), n);
      into->device = load_le<std::uint32_t>(p.data() + 10 + n);
      into->shard = ShardSpec{};
      return {};
    }
  }
  return decode_acquire_checked(p, into);
}

Status decode_acquire_checked(std::span<const std::uint8_t> p, AcquireRequest* into) {
  Reader r(p, "acquire");
  EPK_TRY_ASSIGN(into->model_id, r.get<std::uint32_t>("model_id"));
  EPK_TRY_ASSIGN(into->layout, read_layout(r));
  EPK_TRY(r.get_str_into("tensor", kMaxTensorName, &into->tensor));
  EPK_TRY_ASSIGN(into->device, r.get<std::uint32_t>("device"));
  EPK_TRY(read_shard(r, &into->shard));
  return r.finish();
}

Result<PrefetchRequest> decode_prefetch(std::span<const std::uint8_t> p) {
  Reader r(p, "prefetch");
  PrefetchRequest m;
  EPK_TRY_ASSIGN(m.model_id, r.get<std::uint32_t>("model_id"));
  EPK_TRY_ASSIGN(m.layout, read_layout(r));
  EPK_TRY_ASSIGN(std::uint32_t count, r.get<std::uint32_t>("count"));
  if (count > kMaxPrefetch) return r.bad("count", std::to_string(count) + " exceeds " + std::to_string(kMaxPrefetch));
  // Each name takes at least its 2-byte length: refuse counts the payload cannot hold before reserving.
  if (static_cast<std::uint64_t>(count) * 2 > r.left()) {
    return r.bad("count", std::to_string(count) + " names cannot fit in " + std::to_string(r.left()) + " bytes");
  }
  m.tensors.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    EPK_TRY_ASSIGN(std::string name, r.get_str("tensor", kMaxTensorName));
    m.tensors.push_back(std::move(name));
  }
  EPK_TRY_ASSIGN(m.device, r.get<std::uint32_t>("device"));
  EPK_TRY(read_shard(r, &m.shard));
  EPK_TRY(r.finish());
  return m;
}

Result<ReleaseRequest> decode_release(std::span<const std::uint8_t> p) {
  // A host-fence release (every cache-hit pair ends with one): 16 bytes, read directly.
  if (p.size() == 16 && load_le<std::uint32_t>(p.data() + 8) == static_cast<std::uint32_t>(FenceKind::kHostRelease) &&
      (load_le<std::uint32_t>(p.data() + 12) & ~kReleaseNoReply) == 0) {
    ReleaseRequest m;
    m.handle = load_le<std::uint64_t>(p.data());
    m.fence = FenceKind::kHostRelease;
    m.flags = load_le<std::uint32_t>(p.data() + 12);
    return m;
  }
  return decode_release_checked(p);
}

Result<ReleaseRequest> decode_release_checked(std::span<const std::uint8_t> p) {
  Reader r(p, "release");
  ReleaseRequest m;
  EPK_TRY_ASSIGN(m.handle, r.get<std::uint64_t>("handle"));
  EPK_TRY_ASSIGN(std::uint32_t fence, r.get<std::uint32_t>("fence_kind"));
  if (fence > static_cast<std::uint32_t>(FenceKind::kCudaEvent)) {
    return r.bad("fence_kind", "value " + std::to_string(fence) + " is not a known fence kind");
  }
  m.fence = static_cast<FenceKind>(fence);
  EPK_TRY_ASSIGN(m.flags, r.get<std::uint32_t>("flags"));
  if ((m.flags & ~kReleaseNoReply) != 0) return r.bad("flags", "has unknown bits set");
  if (m.fence == FenceKind::kCudaEvent) {
    for (std::uint8_t& b : m.event) {
      EPK_TRY_ASSIGN(b, r.get<std::uint8_t>("event"));
    }
  }
  EPK_TRY(r.finish());
  return m;
}

Status decode_empty(std::span<const std::uint8_t> p, const char* what) {
  Reader r(p, what);
  return r.finish();
}

Result<HelloReply> decode_hello_reply(std::span<const std::uint8_t> p) {
  Reader r(p, "hello reply");
  HelloReply m;
  EPK_TRY_ASSIGN(m.server_version, r.get<std::uint32_t>("server_version"));
  EPK_TRY_ASSIGN(std::uint32_t count, r.get<std::uint32_t>("pool_count"));
  if (count > kMaxPools) return r.bad("pool_count", std::to_string(count) + " exceeds " + std::to_string(kMaxPools));
  for (std::uint32_t i = 0; i < count; ++i) {
    PoolInfo info;
    EPK_TRY_ASSIGN(info.pool_id, r.get<std::uint32_t>("pool_id"));
    EPK_TRY_ASSIGN(std::uint32_t kind, r.get<std::uint32_t>("kind"));
    if (kind > static_cast<std::uint32_t>(PoolKind::kDevice)) return r.bad("kind", "is not a known pool kind");
    info.kind = static_cast<PoolKind>(kind);
    EPK_TRY_ASSIGN(info.device, r.get<std::int32_t>("device"));
    EPK_TRY_ASSIGN(std::uint32_t reserved, r.get<std::uint32_t>("reserved"));
    if (reserved != 0) return r.bad("reserved", "is not zero");
    EPK_TRY_ASSIGN(info.size, r.get<std::uint64_t>("size"));
    m.pools.push_back(info);
  }
  EPK_TRY_ASSIGN(std::uint32_t events, r.get<std::uint32_t>("event_count"));
  if (events > kMaxEvents) {
    return r.bad("event_count", std::to_string(events) + " exceeds " + std::to_string(kMaxEvents));
  }
  m.events.resize(events);
  for (IpcEventHandle& h : m.events) {
    for (std::uint8_t& b : h) {
      EPK_TRY_ASSIGN(b, r.get<std::uint8_t>("events"));
    }
  }
  EPK_TRY_ASSIGN(m.status_entries, r.get<std::uint32_t>("status_entries"));
  if (m.status_entries > kMaxStatusEntries) {
    return r.bad("status_entries", std::to_string(m.status_entries) + " exceeds " + std::to_string(kMaxStatusEntries));
  }
  EPK_TRY(r.finish());
  return m;
}

Result<OpenModelReply> decode_open_model_reply(std::span<const std::uint8_t> p) {
  return decode_plain(p, kOpenModelReplyLayout);
}

Result<AcquireReply> decode_acquire_reply(std::span<const std::uint8_t> p) {
  AcquireReply m;
  EPK_TRY(decode_acquire_reply(p, &m));
  return m;
}

Status decode_acquire_reply(std::span<const std::uint8_t> p, AcquireReply* into) {
  constexpr std::size_t kFixed = 8 + 4 + 4 + 8 + 8 + 4 + 4;  // up to and including the reserved word after ndim
  constexpr std::size_t kTail = 4 + 4 + 8;                   // done_event, reserved, status_ticket
  if (p.size() >= kFixed + kTail) {
    const std::uint32_t ndim = load_le<std::uint32_t>(p.data() + 32);
    if (ndim <= kMaxDims && load_le<std::uint32_t>(p.data() + 36) == 0 && p.size() == kFixed + ndim * 16u + kTail &&
        load_le<std::uint32_t>(p.data() + kFixed + ndim * 16u + 4) == 0) {
      AcquireReply& m = *into;
      m.handle = load_le<std::uint64_t>(p.data());
      m.pool_id = load_le<std::uint32_t>(p.data() + 8);
      m.dtype = load_le<std::uint32_t>(p.data() + 12);
      m.offset = load_le<std::uint64_t>(p.data() + 16);
      m.bytes = load_le<std::uint64_t>(p.data() + 24);
      m.shape.resize(ndim);  // within a reserved capacity of kMaxDims: no allocation
      m.strides.resize(ndim);
      const std::uint8_t* d = p.data() + kFixed;
      for (std::uint32_t i = 0; i < ndim; ++i) m.shape[i] = load_le<std::uint64_t>(d + 8 * i);
      d += 8 * ndim;
      for (std::uint32_t i = 0; i < ndim; ++i) m.strides[i] = load_le<std::int64_t>(d + 8 * i);
      d += 8 * ndim;
      m.done_event = load_le<std::uint32_t>(d);
      m.status_ticket = load_le<std::uint64_t>(d + 8);
      return {};
    }
  }
  return decode_acquire_reply_checked(p, into);
}

Status decode_acquire_reply_checked(std::span<const std::uint8_t> p, AcquireReply* into) {
  Reader r(p, "acquire reply");
  AcquireReply& m = *into;
  EPK_TRY_ASSIGN(m.handle, r.get<std::uint64_t>("handle"));
  EPK_TRY_ASSIGN(m.pool_id, r.get<std::uint32_t>("pool_id"));
  EPK_TRY_ASSIGN(m.dtype, r.get<std::uint32_t>("dtype"));
  EPK_TRY_ASSIGN(m.offset, r.get<std::uint64_t>("offset"));
  EPK_TRY_ASSIGN(m.bytes, r.get<std::uint64_t>("bytes"));
  EPK_TRY_ASSIGN(std::uint32_t ndim, r.get<std::uint32_t>("ndim"));
  if (ndim > kMaxDims) return r.bad("ndim", std::to_string(ndim) + " exceeds " + std::to_string(kMaxDims));
  EPK_TRY_ASSIGN(std::uint32_t reserved, r.get<std::uint32_t>("reserved"));
  if (reserved != 0) return r.bad("reserved", "is not zero");
  m.shape.resize(ndim);  // within a reserved capacity of kMaxDims: no allocation
  m.strides.resize(ndim);
  for (auto& d : m.shape) {
    EPK_TRY_ASSIGN(d, r.get<std::uint64_t>("shape"));
  }
  for (auto& s : m.strides) {
    EPK_TRY_ASSIGN(s, r.get<std::int64_t>("strides"));
  }
  EPK_TRY_ASSIGN(m.done_event, r.get<std::uint32_t>("done_event"));
  EPK_TRY_ASSIGN(std::uint32_t reserved2, r.get<std::uint32_t>("reserved"));
  if (reserved2 != 0) return r.bad("reserved", "is not zero");
  EPK_TRY_ASSIGN(m.status_ticket, r.get<std::uint64_t>("status_ticket"));
  return r.finish();
}

Result<PrefetchReply> decode_prefetch_reply(std::span<const std::uint8_t> p) {
  return decode_plain(p, kPrefetchReplyLayout);
}

Result<ErrorReply> decode_error(std::span<const std::uint8_t> p) {
  Reader r(p, "error reply");
  ErrorReply m;
  EPK_TRY_ASSIGN(std::uint32_t s, r.get<std::uint32_t>("status"));
  m.status = static_cast<WireStatus>(s);
  EPK_TRY_ASSIGN(m.message, r.get_str("message", kMaxErrorText));
  EPK_TRY(r.finish());
  return m;
}

}  // namespace epk::shm
