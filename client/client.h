// libepk, C++ API: connect to epkd, acquire tensors served from its shared pools, release them. No Boost here.
//
//   auto c = epk::client::Client::connect("/run/epkd.sock");
//   auto t = c->acquire("llama", "layers.0.mlp.up_proj.weight", epk::shm::Layout::kDenseBF16);
//   ... read t->data (t->bytes bytes; t->shape, t->strides in elements, t->dtype) ...
//   c->release(t->handle);
//
// A Client is one connection (one daemon session). Calls are serialised by an internal mutex, so one Client may be
// shared by threads; for parallel requests open several Clients. Acquired memory is the daemon's slot, mapped
// read-write into this process: it stays valid until release(), and the slot is not reused while pinned.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <string>
#include <vector>

#include "codec/common/dtype.h"
#include "codec/common/result.h"
#include "shm/layout.h"
#include "shm/protocol.h"

namespace epk::client {

struct Tensor {
  void* data = nullptr;  // inside a mapped pool of this process
  std::uint64_t bytes = 0;
  DType dtype = DType::kF32;
  std::vector<std::uint64_t> shape;
  std::vector<std::int64_t> strides;  // elements
  std::uint64_t handle = 0;           // pass to release()
  const float* row_scales = nullptr;  // rowwise layouts: shape[0] scales, weight = value * row_scales[row]
  // Device pools: data (and row_scales) are device addresses on CUDA device `device`, valid in this process's
  // primary context; `event` (a CUevent, usable as cudaEvent_t) completes when the decode has; wait() on it first.
  bool on_device = false;
  int device = -1;
  void* event = nullptr;
  // Packed integer layouts (gptq, gptq-v2, awq, marlin): shape is the shm::PackedGeometry descriptor and the slot
  // holds these parts (shm/layout.h), each a row-major array inside data.
  struct Part {
    std::string_view name;  // "qweight", "qzeros", "scales", "g_idx", "perm"
    DType dtype = DType::kI32;
    std::vector<std::uint64_t> shape;
    const void* data = nullptr;
    std::uint64_t bytes = 0;
  };
  std::vector<Part> parts;
};

// The parts of a packed integer slot (data, bytes, dtype and the descriptor shape of an acquire reply), checked
// against the slot's size; kBadInput when the descriptor does not describe `bytes` bytes of `layout`.
Result<std::vector<Tensor::Part>> packed_parts_of(shm::Layout layout, const void* data, std::uint64_t bytes,
                                                  DType dtype, std::span<const std::uint64_t> shape);

using Stats = shm::StatsReply;

struct ClientOptions {
  // Bounds every wait for a reply (an acquire waits for its decode); 0 waits forever.
  int reply_timeout_ms = 60000;
  // Before blocking on a reply, poll the socket (non-blocking recv) for up to this many microseconds: a reply that
  // comes back within it is picked up without the sleep and wake-up of a blocking recv, at the price of one busy
  // core while the call waits. 0 blocks at once; negative: the environment's EPK_SPIN_US, else automatic (50 us on a
  // machine of 8 or more cores, else 0: shm/spin.h, the same rule as epkd's io threads).
  int spin_us = -1;
  // wait() / copy_to_host() on a slot epkd answered before its decode finished (a status ticket) poll the decode
  // status word for up to max(spin_us, status_spin_us) microseconds before sleeping on it: the decode of a large
  // tensor takes ~100 us on the device, and a sleeping thread's wake-up adds tens of microseconds to it. 0: only
  // spin_us.
  int status_spin_us = 200;
};

class Client {
 public:
  // Connects, says hello and maps the daemon's pools. `reply_timeout_ms` bounds every wait for a reply (an acquire
  // waits for its decode); 0 waits forever. Reply polling: EPK_SPIN_US (see ClientOptions::spin_us).
  static Result<Client> connect(const std::string& socket_path, int reply_timeout_ms = 60000);
  static Result<Client> connect(const std::string& socket_path, const ClientOptions& options);
  // The reply spin in effect (after EPK_SPIN_US), in microseconds.
  int spin_us() const;

  Client(Client&&) noexcept;
  Client& operator=(Client&&) noexcept;
  ~Client();

  // Model ids are looked up once per name and cached.
  Result<std::uint32_t> open_model(const std::string& model);
  // Pins `tensor` of `model` in `layout` until release(); waits for its decode on a miss. kNoSpace when the daemon's
  // budget cannot hold it without evicting pinned slots. `device`: the CUDA device whose pool serves it (a daemon
  // serving a host pool takes 0); a device the daemon does not serve is kNotFound.
  // `shard`: a slice of the tensor (shm/shard.h: rows or columns, a range or rank r of n); the Tensor is that slice,
  // compact and row-major, and epkd decodes only what it needs. A shard that does not fit the tensor is
  // kInvalidArgument naming tensor, shape and range.
  Result<Tensor> acquire(const std::string& model, const std::string& tensor,
                         shm::Layout layout = shm::Layout::kStored, std::uint32_t device = 0,
                         const shm::ShardSpec& shard = {});
  // The same into a Tensor the caller keeps: its shape and strides keep their capacity, so repeated acquires through
  // one Tensor allocate nothing in libepk (a cache hit of a dense, rowwise or stored layout; packed integer layouts
  // still build their parts list). Every field of *out is written on success; on error it is left partly written.
  Status acquire_into(const std::string& model, const std::string& tensor, shm::Layout layout, std::uint32_t device,
                      Tensor* out) {
    return acquire_into(model, tensor, layout, device, shm::ShardSpec{}, out);
  }
  Status acquire_into(const std::string& model, const std::string& tensor, shm::Layout layout, std::uint32_t device,
                      const shm::ShardSpec& shard, Tensor* out);
  // Device slots: makes `stream` (a CUstream / cudaStream_t; null = the legacy default stream) wait for t's decode.
  // A slot epkd answered before its decode finished (an uncached device acquire) is first waited for on
  // the CPU (spin_us, then sleeping) until epkd publishes the decode's outcome: a failed decode (a corrupt tile) is
  // kCorruptTile naming the tensor, and the slot must not be read. Otherwise the CPU does not block. No-op for host
  // slots.
  Status wait(const Tensor& t, void* stream);
  // Copies t's bytes into host memory at dst (t.bytes long): waits for the decode first on device slots.
  Status copy_to_host(const Tensor& t, void* dst);
  // Device slots: records this client's interprocess event on `stream` after the caller's last kernel reading the
  // slot and releases with that fence (kCudaEvent): the daemon reuses the bytes only after it has completed. A stream
  // with no work left releases like release() (nothing can still read the slot). On a host pool this is release().
  Status release_after(std::uint64_t handle, void* stream);
  // A model that epkd retired at a reload (removed from its config, or replaced by a new generation because its file
  // changed) answers kNotFound naming it; acquire, prefetch, tensors and open_stored then open the model by name once
  // more, so a replaced model is served from its new generation. Leases taken on the old one stay valid until released.
  // Asks the daemon to decode ahead; returns how many decodes it queued (already cached ones are not counted).
  // `shard`: the same shard of every name (as acquire).
  Result<std::uint32_t> prefetch(const std::string& model, const std::vector<std::string>& tensors,
                                 shm::Layout layout = shm::Layout::kStored, std::uint32_t device = 0,
                                 const shm::ShardSpec& shard = {});
  // Host path: the release message is the fence (this process is done with the slot when it calls release).
  Status release(std::uint64_t handle);
  // The same without waiting for the daemon's answer (one message, no round trip). A failure (a handle this client
  // does not hold) arrives later and is only counted: see deferred_release_errors().
  Status release_nowait(std::uint64_t handle);
  std::uint64_t deferred_release_errors() const;
  Result<Stats> stats();
  // `model`'s tensors in file order: name, dtype, encoding, shape, stored bytes (as many messages as it takes).
  Result<std::vector<shm::TensorInfo>> tensors(const std::string& model);
  // The models the daemon serves, with what of each is in its cache (for `epk status`).
  Result<shm::ModelsReply> models();
  // Client-side decode (client/stored_tier.h builds on this): the model file, open read-only, and the model's
  // compressed tier for `device` of tier_bytes bytes: a device pool fd, or (host) epkd's host tier, a sealed memfd
  // (shm/host_tier.h) where its tier budget keeps the model's tier in host memory. kPermission for a device tier
  // unless epkd lets this client decode itself (root, epkd's uid, client_decode_uids / client_decode_gids);
  // kUnsupported where the model has no tier (a host pool, no lattice-rans tensor).
  struct StoredFds {
    shm::UniqueFd file;
    shm::UniqueFd tier;
    std::uint64_t tier_bytes = 0;
    bool host = false;
  };
  Result<StoredFds> open_stored(const std::string& model, std::uint32_t device);
  // The daemon's pools (kind, device, size) as announced at connect.
  std::vector<shm::PoolInfo> pools() const;
  // Says close, waits for the daemon's answer (bounded by the reply timeout) and drops the connection (the daemon
  // drops any pins still held). The destructor and move assignment do not wait: they send close without blocking,
  // shut the socket and return.
  void disconnect();
  bool connected() const;

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  void close_nowait() noexcept;
  Status check_decoded(std::uint64_t handle);
  Status acquire_once(const std::string& model, const std::string& tensor, shm::Layout layout, std::uint32_t device,
                      const shm::ShardSpec& shard, Tensor* out);
  Result<std::uint32_t> prefetch_once(const std::string& model, const std::vector<std::string>& tensors,
                                      shm::Layout layout, std::uint32_t device, const shm::ShardSpec& shard);
  Result<StoredFds> open_stored_once(const std::string& model, std::uint32_t device);
  Result<std::vector<shm::TensorInfo>> tensors_once(const std::string& model);
  // Drops the model's cached id when `e` says epkd retired it: whether the request should be tried again.
  bool forget_gone_model(const std::string& model, const Error& e);
  std::unique_ptr<Impl> impl_;
};

}  // namespace epk::client
