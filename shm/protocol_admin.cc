// The wire codec of the admin and listing messages (stats, models, tensors, open_stored): shm/protocol.h's table.
#include <algorithm>

#include "shm/protocol.h"
#include "shm/wire_codec.h"

namespace epk::shm {

using namespace wire;  // NOLINT

namespace {

constexpr auto kOpenStoredLayout = plain_layout("open_stored", Field{"model_id", &OpenStoredRequest::model_id},
                                                Field{"device", &OpenStoredRequest::device});
constexpr auto kOpenStoredReplyLayout =
    plain_layout("open_stored reply", Field{"tier_bytes", &OpenStoredReply::tier_bytes},
                 Field{"where", &OpenStoredReply::where});
constexpr auto kTensorsLayout =
    plain_layout("tensors", Field{"model_id", &TensorsRequest::model_id}, Field{"first", &TensorsRequest::first});

}  // namespace

void encode_open_stored(std::uint32_t id, const OpenStoredRequest& m, std::vector<std::uint8_t>* out) {
  encode_plain(id, static_cast<std::uint16_t>(MsgType::kOpenStored), m, kOpenStoredLayout, out);
}

void encode_open_stored_reply(std::uint32_t id, const OpenStoredReply& m, std::vector<std::uint8_t>* out) {
  encode_plain(id, reply(MsgType::kOpenStored), m, kOpenStoredReplyLayout, out);
}

void encode_tensors(std::uint32_t id, const TensorsRequest& m, std::vector<std::uint8_t>* out) {
  encode_plain(id, static_cast<std::uint16_t>(MsgType::kTensors), m, kTensorsLayout, out);
}

void encode_tensors_reply(std::uint32_t id, const TensorsReply& m, std::vector<std::uint8_t>* out) {
  Writer w(out, id, reply(MsgType::kTensors));
  auto ndim = [](const TensorInfo& t) { return std::min<std::size_t>(t.shape.size(), kMaxDims); };
  put_list(
      w, out, m.total, m.tensors,
      [&](const TensorInfo& t) {
        return 2 + std::min(t.name.size(), kMaxTensorName) + 4 + 2 + std::min(t.encoding.size(), kMaxEncodingName) +
               4 + 8 * ndim(t) + 8;
      },
      [&](const TensorInfo& t) {
        w.put_str(t.name, kMaxTensorName);
        w.put<std::uint32_t>(t.dtype);
        w.put_str(t.encoding, kMaxEncodingName);
        w.put<std::uint32_t>(static_cast<std::uint32_t>(ndim(t)));
        for (std::size_t i = 0; i < ndim(t); ++i) w.put<std::uint64_t>(t.shape[i]);
        w.put<std::uint64_t>(t.stored_bytes);
      });
}

void encode_stats_reply(std::uint32_t id, const StatsReply& m, std::vector<std::uint8_t>* out) {
  Writer w(out, id, reply(MsgType::kStats));
  w.put(kStatsFields);
  for (const auto& counter : kStatsCounters) w.put(m.*counter.member);
  auto pools = static_cast<std::uint32_t>(std::min<std::size_t>(m.pools.size(), kMaxPools));
  w.put(pools);
  for (std::uint32_t i = 0; i < pools; ++i) {
    const PoolStats& ps = m.pools[i];
    w.put(ps.pool_id);
    w.put(ps.device);
    for (const auto& counter : kPoolCounters) w.put(ps.*counter.member);
  }
}

Result<OpenStoredRequest> decode_open_stored(std::span<const std::uint8_t> p) {
  return decode_plain(p, kOpenStoredLayout);
}

Result<OpenStoredReply> decode_open_stored_reply(std::span<const std::uint8_t> p) {
  return decode_plain(p, kOpenStoredReplyLayout);
}

Result<TensorsRequest> decode_tensors(std::span<const std::uint8_t> p) { return decode_plain(p, kTensorsLayout); }

Result<TensorsReply> decode_tensors_reply(std::span<const std::uint8_t> p) {
  Reader r(p, "tensors reply");
  TensorsReply m;
  EPK_TRY_ASSIGN(m.total, r.get<std::uint32_t>("total"));
  EPK_TRY_ASSIGN(std::uint32_t count, get_list_count(r, m.total, 2 + 4 + 2 + 4 + 8));
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
  put_list(
      w, out, m.total, m.models,
      [](const ModelInfo& info) { return 2 + std::min(info.name.size(), kMaxModelName) + 4 + 5 * 8; },
      [&](const ModelInfo& info) {
        w.put_str(info.name, kMaxModelName);
        w.put<std::uint32_t>(info.tensors);
        w.put<std::uint64_t>(info.cached_slots);
        w.put<std::uint64_t>(info.cached_bytes);
        w.put<std::uint64_t>(info.pinned_slots);
        w.put<std::uint64_t>(info.tier_device_bytes);
        w.put<std::uint64_t>(info.tier_host_bytes);
      });
}

Result<ModelsReply> decode_models_reply(std::span<const std::uint8_t> p) {
  Reader r(p, "models reply");
  ModelsReply m;
  EPK_TRY_ASSIGN(m.total, r.get<std::uint32_t>("total"));
  EPK_TRY_ASSIGN(std::uint32_t count, get_list_count(r, m.total, 2 + 4 + 5 * 8));
  m.models.resize(count);
  for (ModelInfo& info : m.models) {
    EPK_TRY_ASSIGN(info.name, r.get_str("name", kMaxModelName));
    EPK_TRY_ASSIGN(info.tensors, r.get<std::uint32_t>("tensors"));
    EPK_TRY_ASSIGN(info.cached_slots, r.get<std::uint64_t>("cached_slots"));
    EPK_TRY_ASSIGN(info.cached_bytes, r.get<std::uint64_t>("cached_bytes"));
    EPK_TRY_ASSIGN(info.pinned_slots, r.get<std::uint64_t>("pinned_slots"));
    EPK_TRY_ASSIGN(info.tier_device_bytes, r.get<std::uint64_t>("tier_device_bytes"));
    EPK_TRY_ASSIGN(info.tier_host_bytes, r.get<std::uint64_t>("tier_host_bytes"));
  }
  EPK_TRY(r.finish());
  return m;
}

Result<StatsReply> decode_stats_reply(std::span<const std::uint8_t> p) {
  Reader r(p, "stats reply");
  EPK_TRY_ASSIGN(std::uint32_t n, r.get<std::uint32_t>("field_count"));
  if (n != kStatsFields) return r.bad("field_count", std::to_string(n) + ", expected " + std::to_string(kStatsFields));
  StatsReply m;
  for (const auto& counter : kStatsCounters) {
    EPK_TRY_ASSIGN(m.*counter.member, r.get<std::uint64_t>("stats"));
  }
  EPK_TRY_ASSIGN(std::uint32_t pools, r.get<std::uint32_t>("pool_count"));
  if (pools > kMaxPools) return r.bad("pool_count", std::to_string(pools) + " exceeds " + std::to_string(kMaxPools));
  m.pools.resize(pools);
  for (PoolStats& ps : m.pools) {
    EPK_TRY_ASSIGN(ps.pool_id, r.get<std::uint32_t>("pool_id"));
    EPK_TRY_ASSIGN(ps.device, r.get<std::int32_t>("device"));
    for (const auto& counter : kPoolCounters) {
      EPK_TRY_ASSIGN(ps.*counter.member, r.get<std::uint64_t>("pool stats"));
    }
  }
  EPK_TRY(r.finish());
  return m;
}

}  // namespace epk::shm
