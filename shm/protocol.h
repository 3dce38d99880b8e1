// The epkd wire protocol: versioned, fixed-layout, little-endian messages over a Unix stream socket. docs/PROTOCOL.md
// documents the current version (kProtocolVersion) as one table per message, the statuses, the session rules and
// the versioning rules; this header holds its constants and message structs, shm/protocol.cc and protocol_admin.cc
// its codec. A change here changes that page.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include "codec/common/result.h"
#include "shm/decode_status.h"
#include "shm/fence.h"
#include "shm/layout.h"
#include "shm/pool.h"
#include "shm/shard.h"

namespace epk::shm {

inline constexpr std::uint32_t kWireMagic = 0x5750454Bu;
inline constexpr std::uint16_t kProtocolVersion = 5;
inline constexpr std::size_t kHeaderSize = 16;
inline constexpr std::uint32_t kMaxPayload = 64 * 1024 - kHeaderSize;
inline constexpr std::size_t kMaxMessage = kHeaderSize + kMaxPayload;
inline constexpr std::size_t kMaxModelName = 256;
inline constexpr std::size_t kMaxTensorName = 1024;
inline constexpr std::size_t kMaxErrorText = 1024;
inline constexpr std::size_t kMaxEncodingName = 64;
inline constexpr std::uint32_t kMaxDims = 8;
inline constexpr std::uint32_t kMaxPrefetch = 256;
inline constexpr std::uint32_t kMaxPools = 16;
inline constexpr std::uint32_t kMaxEvents = 512;           // decode-done rings, all pools, in a hello reply
inline constexpr std::uint32_t kNoEvent = 0xFFFFFFFFu;     // acquire reply: nothing to wait on (host pools)
inline constexpr std::size_t kIpcEventHandleBytes = 64;    // sizeof(CUipcEventHandle)
inline constexpr std::uint16_t kReplyBit = 0x8000;
inline constexpr unsigned kHandlePoolShift = 56;  // handle >> kHandlePoolShift: the pool id of the slot (version 3)
inline constexpr std::uint32_t handle_pool(std::uint64_t handle) {
  return static_cast<std::uint32_t>(handle >> kHandlePoolShift);
}
inline constexpr std::uint32_t kReleaseNoReply = 1;  // release flag: answer only a failure

enum class MsgType : std::uint16_t {
  kHello = 1,
  kOpenModel = 2,
  kAcquire = 3,
  kPrefetch = 4,
  kRelease = 5,
  kStats = 6,
  kClose = 7,
  kModels = 8,
  kOpenStored = 9,
  kTensors = 10,
  kError = 0xFFFF,
};
const char* msg_type_name(std::uint16_t type);

// Status carried by an error reply. Stored on the wire: never renumber.
enum class WireStatus : std::uint32_t {
  kBadMessage = 1,    // malformed, truncated or oversized; the session is closed after this reply
  kBadVersion = 2,    // protocol version mismatch; the session is closed
  kNotFound = 3,      // unknown model, tensor or handle
  kUnsupported = 4,   // layout or fence kind not servable here
  kNoSpace = 5,       // the request cannot fit in the budget without evicting pinned slots
  kDecodeFailed = 6,  // the source refused to produce the tensor (corrupt data)
  kShuttingDown = 7,
  kInternal = 8,
  kDenied = 9,     // the peer's credentials do not allow it (at hello: the session is closed after this reply)
  kOverQuota = 10,  // the client is over its own pin quota (the budget may have room)
  kModelGone = 11,  // the model id names a model retired at a reload (removed, or replaced by a new generation under
                    // the same name: open it again by name); the leases held on it stay valid until released
  kInvalidArgument = 12,  // a well-formed request that asks for something that does not exist (a shard past the
                          // tensor); the session stays open
};
const char* wire_status_name(WireStatus s);

struct FrameHeader {
  std::uint16_t version = kProtocolVersion;
  std::uint16_t type = 0;
  std::uint32_t request_id = 0;
  std::uint32_t payload_size = 0;
};

// Checks magic, version and payload size. The error names the field.
Result<FrameHeader> decode_header(std::span<const std::uint8_t> bytes);
void encode_header(const FrameHeader& h, std::uint8_t* out);

struct PoolInfo {
  std::uint32_t pool_id = 0;
  PoolKind kind = PoolKind::kHost;
  std::int32_t device = -1;
  std::uint64_t size = 0;
};

struct HelloRequest {
  std::uint32_t client_pid = 0;
  std::uint32_t flags = 0;
};
using IpcEventHandle = std::array<std::uint8_t, kIpcEventHandleBytes>;
struct HelloReply {
  std::uint32_t server_version = kProtocolVersion;
  std::vector<PoolInfo> pools;
  std::vector<IpcEventHandle> events;  // decode-done ring (device pools); acquire replies index it
  std::uint32_t status_entries = 0;     // version 4: the decode status table's length (its fd follows the pools')
};
struct OpenModelRequest {
  std::string model;
};
struct OpenModelReply {
  std::uint32_t model_id = 0;
  std::uint32_t tensor_count = 0;
};
struct AcquireRequest {
  std::uint32_t model_id = 0;
  Layout layout = Layout::kStored;
  std::string tensor;
  std::uint32_t device = 0;  // version 3
  ShardSpec shard;           // docs/PROTOCOL.md, acquire: whole unless set
};
struct AcquireReply {
  std::uint64_t handle = 0;
  std::uint32_t pool_id = 0;
  std::uint32_t dtype = 0;  // epk::DType code
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
  std::vector<std::uint64_t> shape;
  std::vector<std::int64_t> strides;  // in elements
  std::uint32_t done_event = kNoEvent;  // index into HelloReply::events; the decode is done once it completes
  std::uint64_t status_ticket = 0;      // version 4: 0, or the decode status ticket to wait for (decode_status.h)
};
struct PrefetchRequest {
  std::uint32_t model_id = 0;
  Layout layout = Layout::kStored;
  std::vector<std::string> tensors;
  std::uint32_t device = 0;  // version 3
  ShardSpec shard;           // docs/PROTOCOL.md, prefetch: the same shard of every name
};
struct PrefetchReply {
  std::uint32_t queued = 0;
};
struct ReleaseRequest {
  std::uint64_t handle = 0;
  FenceKind fence = FenceKind::kHostRelease;
  std::uint32_t flags = 0;  // kReleaseNoReply
  IpcEventHandle event{};   // kCudaEvent only: the client's interprocess event, recorded after its last read
};
// One pool's share of the stats (version 3).
struct PoolStats {
  std::uint32_t pool_id = 0;
  std::int32_t device = -1;  // -1: a host pool
  std::uint64_t budget_bytes = 0;
  std::uint64_t used_bytes = 0;
  std::uint64_t pinned_bytes = 0;
  std::uint64_t slots = 0;
  std::uint64_t pinned_slots = 0;
  std::uint64_t pins = 0;
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t evictions = 0;
  std::uint64_t resident_bytes = 0;
  std::uint64_t fenced_bytes = 0;      // unpinned slots released behind fences still pending
  std::uint64_t prefetched_bytes = 0;  // slots a prefetch made that no client has acquired yet
  // Version 5: compressed tiers this device lane decodes from host memory (tier_budget_mb left them no room on the
  // device), and the bytes its decodes copied from them to the device so far.
  std::uint64_t host_tier_bytes = 0;
  std::uint64_t staged_bytes = 0;
  bool operator==(const PoolStats&) const = default;
};
inline constexpr std::uint32_t kPoolStatsFields = 14;
struct StatsReply {
  std::uint64_t budget_bytes = 0;
  std::uint64_t used_bytes = 0;
  std::uint64_t pinned_bytes = 0;
  std::uint64_t slots = 0;
  std::uint64_t pinned_slots = 0;
  std::uint64_t pins = 0;
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t evictions = 0;
  std::uint64_t decodes = 0;
  std::uint64_t decode_ns = 0;
  std::uint64_t clients = 0;
  std::uint64_t models = 0;
  std::uint64_t prefetches = 0;
  std::uint64_t resident_bytes = 0;  // the device-resident compressed tier (outside budget_bytes); 0 on host pools
  std::uint64_t prefetches_dropped = 0;  // prefetched names not decoded: no space, or an acquire waiting for it
  std::uint64_t space_waits = 0;         // acquires that waited for fenced or decoding slots to come free
  std::uint64_t space_wait_ns = 0;       // their waits, in all
  std::vector<PoolStats> pools;      // version 3: per pool (<= kMaxPools)
};
inline constexpr std::uint32_t kStatsFields = 18;

// A 64-bit counter of a stats reply, or of one of its pools: the member's name (the key the Python package's
// Client.stats() gives it) and the member. The two tables list them in wire order.
template <class Stats>
struct StatsCounter {
  const char* name;
  std::uint64_t Stats::*member;
};
inline constexpr StatsCounter<StatsReply> kStatsCounters[] = {
    {"budget_bytes", &StatsReply::budget_bytes},
    {"used_bytes", &StatsReply::used_bytes},
    {"pinned_bytes", &StatsReply::pinned_bytes},
    {"slots", &StatsReply::slots},
    {"pinned_slots", &StatsReply::pinned_slots},
    {"pins", &StatsReply::pins},
    {"hits", &StatsReply::hits},
    {"misses", &StatsReply::misses},
    {"evictions", &StatsReply::evictions},
    {"decodes", &StatsReply::decodes},
    {"decode_ns", &StatsReply::decode_ns},
    {"clients", &StatsReply::clients},
    {"models", &StatsReply::models},
    {"prefetches", &StatsReply::prefetches},
    {"resident_bytes", &StatsReply::resident_bytes},
    {"prefetches_dropped", &StatsReply::prefetches_dropped},
    {"space_waits", &StatsReply::space_waits},
    {"space_wait_ns", &StatsReply::space_wait_ns},
};
static_assert(std::size(kStatsCounters) == kStatsFields);
inline constexpr StatsCounter<PoolStats> kPoolCounters[] = {
    {"budget_bytes", &PoolStats::budget_bytes},
    {"used_bytes", &PoolStats::used_bytes},
    {"pinned_bytes", &PoolStats::pinned_bytes},
    {"slots", &PoolStats::slots},
    {"pinned_slots", &PoolStats::pinned_slots},
    {"pins", &PoolStats::pins},
    {"hits", &PoolStats::hits},
    {"misses", &PoolStats::misses},
    {"evictions", &PoolStats::evictions},
    {"resident_bytes", &PoolStats::resident_bytes},
    {"fenced_bytes", &PoolStats::fenced_bytes},
    {"prefetched_bytes", &PoolStats::prefetched_bytes},
    {"host_tier_bytes", &PoolStats::host_tier_bytes},
    {"staged_bytes", &PoolStats::staged_bytes},
};
static_assert(std::size(kPoolCounters) == kPoolStatsFields);
struct ModelInfo {
  std::string name;
  std::uint32_t tensors = 0;
  std::uint64_t cached_slots = 0;  // slots of this model in the cache (ready or decoding)
  std::uint64_t cached_bytes = 0;
  std::uint64_t pinned_slots = 0;
  // Version 5: the model's compressed tier on the devices (its regions, summed over the pools) and in host memory
  // (its host tier, one per model), so that a user sees each model's split.
  std::uint64_t tier_device_bytes = 0;
  std::uint64_t tier_host_bytes = 0;
};
struct ModelsReply {
  std::uint32_t total = 0;  // models served; models.size() may be smaller when the list did not fit one message
  std::vector<ModelInfo> models;
};
struct OpenStoredRequest {
  std::uint32_t model_id = 0;
  std::uint32_t device = 0;
};
// Where the tier an open_stored reply passes lives (version 5).
enum class TierWhere : std::uint32_t {
  kDevice = 0,  // a device pool fd (CUDA VMM) on the device asked for
  kHost = 1,    // epkd's host tier: a sealed memfd (shm/host_tier.h)
};
struct OpenStoredReply {
  std::uint64_t tier_bytes = 0;
  std::uint32_t where = static_cast<std::uint32_t>(TierWhere::kDevice);
};
struct TensorsRequest {
  std::uint32_t model_id = 0;
  std::uint32_t first = 0;  // the index of the first tensor to list (the model's file order)
};
struct TensorInfo {
  std::string name;
  std::uint32_t dtype = 0;  // epk::DType code, as stored
  std::string encoding;     // "raw", "lattice-rans", "intq", ...
  std::vector<std::uint64_t> shape;
  std::uint64_t stored_bytes = 0;
  bool operator==(const TensorInfo&) const = default;
};
struct TensorsReply {
  std::uint32_t total = 0;  // the model's tensors; tensors.size() may be smaller (ask again from first + size)
  std::vector<TensorInfo> tensors;
};
struct ErrorReply {
  WireStatus status = WireStatus::kInternal;
  std::string message;
};

// Encoders write a whole message (header + payload) into `out` (cleared first).
void encode_hello(std::uint32_t id, const HelloRequest& m, std::vector<std::uint8_t>* out);
void encode_open_model(std::uint32_t id, const OpenModelRequest& m, std::vector<std::uint8_t>* out);
void encode_acquire(std::uint32_t id, const AcquireRequest& m, std::vector<std::uint8_t>* out);
void encode_prefetch(std::uint32_t id, const PrefetchRequest& m, std::vector<std::uint8_t>* out);
void encode_release(std::uint32_t id, const ReleaseRequest& m, std::vector<std::uint8_t>* out);
void encode_empty(std::uint32_t id, MsgType type, std::vector<std::uint8_t>* out);  // stats, close, empty replies
void encode_open_stored(std::uint32_t id, const OpenStoredRequest& m, std::vector<std::uint8_t>* out);
void encode_open_stored_reply(std::uint32_t id, const OpenStoredReply& m, std::vector<std::uint8_t>* out);
void encode_tensors(std::uint32_t id, const TensorsRequest& m, std::vector<std::uint8_t>* out);
// Writes as many of m.tensors as fit in kMaxPayload (at least none); total is written as given.
void encode_tensors_reply(std::uint32_t id, const TensorsReply& m, std::vector<std::uint8_t>* out);
void encode_hello_reply(std::uint32_t id, const HelloReply& m, std::vector<std::uint8_t>* out);
void encode_open_model_reply(std::uint32_t id, const OpenModelReply& m, std::vector<std::uint8_t>* out);
void encode_acquire_reply(std::uint32_t id, const AcquireReply& m, std::vector<std::uint8_t>* out);
void encode_prefetch_reply(std::uint32_t id, const PrefetchReply& m, std::vector<std::uint8_t>* out);
void encode_stats_reply(std::uint32_t id, const StatsReply& m, std::vector<std::uint8_t>* out);
// Writes as many of m.models as fit in kMaxPayload; total is written as given.
void encode_models_reply(std::uint32_t id, const ModelsReply& m, std::vector<std::uint8_t>* out);
// The message text is cut to kMaxErrorText.
void encode_error(std::uint32_t id, const ErrorReply& m, std::vector<std::uint8_t>* out);

// Decoders take the payload only (after decode_header) and must consume it exactly.
Result<HelloRequest> decode_hello(std::span<const std::uint8_t> p);
Result<OpenModelRequest> decode_open_model(std::span<const std::uint8_t> p);
Result<AcquireRequest> decode_acquire(std::span<const std::uint8_t> p);
// The same into an existing request: its tensor string keeps its capacity, so a session that reserved kMaxTensorName
// decodes acquires without allocating. On error *into is left partly written.
Status decode_acquire(std::span<const std::uint8_t> p, AcquireRequest* into);
Result<PrefetchRequest> decode_prefetch(std::span<const std::uint8_t> p);
Result<ReleaseRequest> decode_release(std::span<const std::uint8_t> p);
Status decode_empty(std::span<const std::uint8_t> p, const char* what);
Result<HelloReply> decode_hello_reply(std::span<const std::uint8_t> p);
Result<OpenModelReply> decode_open_model_reply(std::span<const std::uint8_t> p);
Result<AcquireReply> decode_acquire_reply(std::span<const std::uint8_t> p);
// The same into an existing reply: shape and strides keep their capacity, so a client that reserved kMaxDims decodes
// acquire replies without allocating. On error *into is left partly written.
Status decode_acquire_reply(std::span<const std::uint8_t> p, AcquireReply* into);
// decode_acquire (into), decode_release and decode_acquire_reply (into) read a well-formed message directly (the
// cache-hit path) and hand everything else to these field-by-field reference decoders, which name the bad field; the
// tests hold the fast paths to them.
Status decode_acquire_checked(std::span<const std::uint8_t> p, AcquireRequest* into);
Result<ReleaseRequest> decode_release_checked(std::span<const std::uint8_t> p);
Status decode_acquire_reply_checked(std::span<const std::uint8_t> p, AcquireReply* into);
Result<PrefetchReply> decode_prefetch_reply(std::span<const std::uint8_t> p);
Result<StatsReply> decode_stats_reply(std::span<const std::uint8_t> p);
Result<ModelsReply> decode_models_reply(std::span<const std::uint8_t> p);
Result<ErrorReply> decode_error(std::span<const std::uint8_t> p);
Result<OpenStoredRequest> decode_open_stored(std::span<const std::uint8_t> p);
Result<OpenStoredReply> decode_open_stored_reply(std::span<const std::uint8_t> p);
Result<TensorsRequest> decode_tensors(std::span<const std::uint8_t> p);
Result<TensorsReply> decode_tensors_reply(std::span<const std::uint8_t> p);

}  // namespace epk::shm
