// The wire codec of the admin and listing messages (stats, models, tensors, open_stored): shm/protocol.h's table.
#include <algorithm>

#include "shm/protocol.h"
#include "shm/wire_codec.h"

namespace epk::shm {

using namespace wire;  // NOLINT

void encode_open_stored(std::uint32_t id, const OpenStoredRequest& m, std::vector<std::uint8_t>* out) {
  Writer w(out, id, static_cast<std::uint16_t>(MsgType::kOpenStored));
  w.put(m.model_id);
  w.put(m.device);
}

void encode_open_stored_reply(std::uint32_t id, const OpenStoredReply& m, std::vector<std::uint8_t>* out) {
  Writer w(out, id, reply(MsgType::kOpenStored));
  w.put(m.tier_bytes);
}

void encode_tensors(std::uint32_t id, const TensorsRequest& m, std::vector<std::uint8_t>* out) {
  Writer w(out, id, static_cast<std::uint16_t>(MsgType::kTensors));
  w.put(m.model_id);
  w.put(m.first);
}

void encode_tensors_reply(std::uint32_t id, const TensorsReply& m, std::vector<std::uint8_t>* out) {
  Writer w(out, id, reply(MsgType::kTensors));
  w.put<std::uint32_t>(m.total);
  const std::size_t count_at = out->size();
  w.put<std::uint32_t>(0);
  std::uint32_t count = 0;
  for (const TensorInfo& t : m.tensors) {
    const std::size_t name = std::min(t.name.size(), kMaxTensorName);
    const std::size_t enc = std::min(t.encoding.size(), kMaxEncodingName);
    const std::size_t ndim = std::min<std::size_t>(t.shape.size(), kMaxDims);
    if (out->size() - kHeaderSize + 2 + name + 4 + 2 + enc + 4 + 8 * ndim + 8 > kMaxPayload) break;
    w.put_str(t.name, kMaxTensorName);
    w.put<std::uint32_t>(t.dtype);
    w.put_str(t.encoding, kMaxEncodingName);
    w.put<std::uint32_t>(static_cast<std::uint32_t>(ndim));
    for (std::size_t i = 0; i < ndim; ++i) w.put<std::uint64_t>(t.shape[i]);
    w.put<std::uint64_t>(t.stored_bytes);
    ++count;
  }
  store_le<std::uint32_t>(out->data() + count_at, count);
}

void encode_stats_reply(std::uint32_t id, const StatsReply& m, std::vector<std::uint8_t>* out) {
  Writer w(out, id, reply(MsgType::kStats));
  w.put(kStatsFields);
  for (std::uint64_t v : {m.budget_bytes, m.used_bytes, m.pinned_bytes, m.slots, m.pinned_slots, m.pins, m.hits,
                          m.misses, m.evictions, m.decodes, m.decode_ns, m.clients, m.models, m.prefetches,
                          m.resident_bytes, m.prefetches_dropped, m.space_waits, m.space_wait_ns}) {
    w.put(v);
  }
  auto pools = static_cast<std::uint32_t>(std::min<std::size_t>(m.pools.size(), kMaxPools));
  w.put(pools);
  for (std::uint32_t i = 0; i < pools; ++i) {
    const PoolStats& ps = m.pools[i];
    w.put(ps.pool_id);
    w.put(ps.device);
    for (std::uint64_t v : {ps.budget_bytes, ps.used_bytes, ps.pinned_bytes, ps.slots, ps.pinned_slots, ps.pins,
                            ps.hits, ps.misses, ps.evictions, ps.resident_bytes, ps.fenced_bytes,
                            ps.prefetched_bytes}) {
      w.put(v);
    }
  }
}

Result<OpenStoredRequest> decode_open_stored(std::span<const std::uint8_t> p) {
  Reader r(p, "open_stored");
  OpenStoredRequest m;
  EPK_TRY_ASSIGN(m.model_id, r.get<std::uint32_t>("model_id"));
  EPK_TRY_ASSIGN(m.device, r.get<std::uint32_t>("device"));
  EPK_TRY(r.finish());
  return m;
}

Result<OpenStoredReply> decode_open_stored_reply(std::span<const std::uint8_t> p) {
  Reader r(p, "open_stored reply");
  OpenStoredReply m;
  EPK_TRY_ASSIGN(m.tier_bytes, r.get<std::uint64_t>("tier_bytes"));
  EPK_TRY(r.finish());
  return m;
}

Result<TensorsRequest> decode_tensors(std::span<const std::uint8_t> p) {
  Reader r(p, "tensors");
  TensorsRequest m;
  EPK_TRY_ASSIGN(m.model_id, r.get<std::uint32_t>("model_id"));
  EPK_TRY_ASSIGN(m.first, r.get<std::uint32_t>("first"));
  EPK_TRY(r.finish());
  return m;
}

Result<TensorsReply> decode_tensors_reply(std::span<const std::uint8_t> p) {
  Reader r(p, "tensors reply");
  TensorsReply m;
  EPK_TRY_ASSIGN(m.total, r.get<std::uint32_t>("total"));
  EPK_TRY_ASSIGN(std::uint32_t count, r.get<std::uint32_t>("count"));
  constexpr std::size_t kMinEntry = 2 + 4 + 2 + 4 + 8;
  if (count > m.total || count > r.left() / kMinEntry) {
    return r.bad("count", std::to_string(count) + " exceeds the total or the bytes left");
  }
  m.tensors.resize(count);
  for (TensorInfo& t : m.tensors) {
    EPK_TRY_ASSIGN(t.name, r.get_str("name", kMaxTensorName));
    EPK_TRY_ASSIGN(t.dtype, r.get<std::uint32_t>("dtype"));
    EPK_TRY_ASSIGN(t.encoding, r.get_str("encoding", kMaxEncodingName));
    EPK_TRY_ASSIGN(std::uint32_t ndim, r.get<std::uint32_t>("ndim"));
    if (ndim > kMaxDims) return r.bad("ndim", std::to_string(ndim) + " exceeds " + std::to_string(kMaxDims));
    t.shape.resize(ndim);
    for (std::uint64_t& d : t.shape) {
      EPK_TRY_ASSIGN(d, r.get<std::uint64_t>("shape"));
    }
    EPK_TRY_ASSIGN(t.stored_bytes, r.get<std::uint64_t>("stored_bytes"));
  }
  EPK_TRY(r.finish());
  return m;
}

void encode_models_reply(std::uint32_t id, const ModelsReply& m, std::vector<std::uint8_t>* out) {
  Writer w(out, id, reply(MsgType::kModels));
  w.put<std::uint32_t>(m.total);
  const std::size_t count_at = out->size();
  w.put<std::uint32_t>(0);
  std::uint32_t count = 0;
  for (const ModelInfo& info : m.models) {
    const std::size_t name = std::min(info.name.size(), kMaxModelName);
    if (out->size() - kHeaderSize + 2 + name + 4 + 3 * 8 > kMaxPayload) break;
    w.put_str(info.name, kMaxModelName);
    w.put<std::uint32_t>(info.tensors);
    w.put<std::uint64_t>(info.cached_slots);
    w.put<std::uint64_t>(info.cached_bytes);
    w.put<std::uint64_t>(info.pinned_slots);
    ++count;
  }
  store_le<std::uint32_t>(out->data() + count_at, count);
}

Result<ModelsReply> decode_models_reply(std::span<const std::uint8_t> p) {
  Reader r(p, "models reply");
  ModelsReply m;
  EPK_TRY_ASSIGN(m.total, r.get<std::uint32_t>("total"));
  EPK_TRY_ASSIGN(std::uint32_t count, r.get<std::uint32_t>("count"));
  constexpr std::size_t kMinEntry = 2 + 4 + 3 * 8;
  if (count > m.total || count > r.left() / kMinEntry) {
    return r.bad("count", std::to_string(count) + " exceeds the total or the bytes left");
  }
  m.models.resize(count);
  for (ModelInfo& info : m.models) {
    EPK_TRY_ASSIGN(info.name, r.get_str("name", kMaxModelName));
    EPK_TRY_ASSIGN(info.tensors, r.get<std::uint32_t>("tensors"));
    EPK_TRY_ASSIGN(info.cached_slots, r.get<std::uint64_t>("cached_slots"));
    EPK_TRY_ASSIGN(info.cached_bytes, r.get<std::uint64_t>("cached_bytes"));
    EPK_TRY_ASSIGN(info.pinned_slots, r.get<std::uint64_t>("pinned_slots"));
  }
  EPK_TRY(r.finish());
  return m;
}

Result<StatsReply> decode_stats_reply(std::span<const std::uint8_t> p) {
  Reader r(p, "stats reply");
  EPK_TRY_ASSIGN(std::uint32_t n, r.get<std::uint32_t>("field_count"));
  if (n != kStatsFields) return r.bad("field_count", std::to_string(n) + ", expected " + std::to_string(kStatsFields));
  StatsReply m;
  for (std::uint64_t* f : {&m.budget_bytes, &m.used_bytes, &m.pinned_bytes, &m.slots, &m.pinned_slots, &m.pins, &m.hits,
                           &m.misses, &m.evictions, &m.decodes, &m.decode_ns, &m.clients, &m.models, &m.prefetches,
                           &m.resident_bytes, &m.prefetches_dropped, &m.space_waits, &m.space_wait_ns}) {
    EPK_TRY_ASSIGN(*f, r.get<std::uint64_t>("stats"));
  }
  EPK_TRY_ASSIGN(std::uint32_t pools, r.get<std::uint32_t>("pool_count"));
  if (pools > kMaxPools) return r.bad("pool_count", std::to_string(pools) + " exceeds " + std::to_string(kMaxPools));
  m.pools.resize(pools);
  for (PoolStats& ps : m.pools) {
    EPK_TRY_ASSIGN(ps.pool_id, r.get<std::uint32_t>("pool_id"));
    EPK_TRY_ASSIGN(ps.device, r.get<std::int32_t>("device"));
    for (std::uint64_t* f : {&ps.budget_bytes, &ps.used_bytes, &ps.pinned_bytes, &ps.slots, &ps.pinned_slots, &ps.pins,
                             &ps.hits, &ps.misses, &ps.evictions, &ps.resident_bytes, &ps.fenced_bytes,
                             &ps.prefetched_bytes}) {
      EPK_TRY_ASSIGN(*f, r.get<std::uint64_t>("pool stats"));
    }
  }
  EPK_TRY(r.finish());
  return m;
}

}  // namespace epk::shm
