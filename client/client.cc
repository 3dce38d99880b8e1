#include "client/client.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "client/device_client.h"
#include "codec/common/bytes.h"
#include "shm/decode_status.h"
#include "shm/fd_passing.h"
#include "shm/pool.h"
#include "shm/spin.h"
#include "shm/unique_fd.h"

namespace epk::client {

namespace {

// A shard the wire cannot carry (an unknown dim or form) would be a malformed message, which closes the session:
// refused here instead. Its range is checked by epkd, against the tensor's shape.
Status check_shard_fields(const shm::ShardSpec& s) {
  const auto dim = static_cast<std::uint32_t>(s.dim), form = static_cast<std::uint32_t>(s.form);
  if (dim > 2 || form > 1) {
    return make_error(ErrorCode::kInvalidArgument, "epk client: shard dim " + std::to_string(dim) + " form " +
                                                       std::to_string(form) +
                                                       " unknown (dim: 0 none, 1 rows, 2 cols; form: 0 range, 1 split)");
  }
  return {};
}

ErrorCode code_for(shm::WireStatus s) {
  switch (s) {
    case shm::WireStatus::kNotFound:
    case shm::WireStatus::kModelGone: return ErrorCode::kNotFound;
    case shm::WireStatus::kUnsupported:
    case shm::WireStatus::kBadVersion: return ErrorCode::kUnsupported;
    case shm::WireStatus::kNoSpace: return ErrorCode::kNoSpace;
    case shm::WireStatus::kDecodeFailed: return ErrorCode::kCorruptTile;
    case shm::WireStatus::kBadMessage: return ErrorCode::kBadInput;
    case shm::WireStatus::kShuttingDown: return ErrorCode::kIo;
    case shm::WireStatus::kDenied: return ErrorCode::kPermission;
    case shm::WireStatus::kOverQuota: return ErrorCode::kQuota;
    case shm::WireStatus::kInvalidArgument: return ErrorCode::kInvalidArgument;
    default: return ErrorCode::kInternal;
  }
}

// A reply frame as received: the payload is a view into the client's receive buffer, valid until the next
// next_frame() (callers decode it at once). No copy and no allocation per reply.
struct Frame {
  shm::FrameHeader header;
  std::span<const std::uint8_t> payload;
};

}  // namespace

struct Client::Impl {
  std::mutex mu;
  shm::UniqueFd sock;
  std::vector<shm::ImportedPool> pools;
  // By pool id. The hello lists the pools of this client's trust domain only, so ids may have gaps: a gap's entry has
  // size 0 (a real pool never does) and nothing mapped.
  std::vector<shm::PoolInfo> pool_info;  // as the hello reply announced them
  std::vector<std::uint64_t> device_base;  // device pools: the mapped base address (0 for host pools)
  std::unique_ptr<DeviceSide> device;      // device pools and events; null when the daemon serves host pools only
  std::vector<std::uint32_t> ring_first;   // per pool: its ring's first index in the hello's event list
  std::uint32_t ring_length = 0;           // events per device pool's ring
  std::unordered_map<std::string, std::uint32_t> model_ids;
  std::uint32_t next_id = 1;
  std::vector<std::uint8_t> tx;
  std::vector<std::uint8_t> rx;  // bytes received and not yet consumed
  std::size_t rx_have = 0;
  std::size_t rx_drop = 0;  // the frame last returned by next_frame (its payload still viewed): dropped next call
  // The hit path's scratch, reserved once (kMaxTensorName, kMaxDims): an acquire encodes its request and decodes its
  // reply without allocating.
  shm::AcquireRequest acquire_req;
  shm::AcquireReply acquire_reply;
  std::uint64_t deferred_release_errors = 0;
  // The last kNowaitIds release_nowait request ids, which may still be answered (with an error): a fixed ring, so a
  // release_nowait allocates nothing; an older id is forgotten (its failure, if any, goes uncounted). 0: empty.
  static constexpr std::size_t kNowaitIds = 4096;
  std::array<std::uint32_t, kNowaitIds> nowait_ids{};
  std::size_t nowait_next = 0;
  void remember_nowait(std::uint32_t id) { nowait_ids[nowait_next++ % kNowaitIds] = id; }
  // Called on error replies only: a linear search is fine there.
  bool forget_nowait(std::uint32_t id) {
    if (id == 0) return false;
    for (std::uint32_t& v : nowait_ids) {
      if (v == id) {
        v = 0;
        return true;
      }
    }
    return false;
  }
  int spin_us = 0;
  int reply_timeout_ms = 0;
  int status_spin_us = 0;
  // epkd's decode status table (docs/PROTOCOL.md, hello), and the slots acquired from an early reply whose decode this
  // client has not yet seen succeed (handle -> ticket and tensor name). wait() and copy_to_host() check them.
  shm::StatusView status;
  struct Unchecked {
    std::uint64_t ticket = 0;
    std::string tensor;
  };
  std::unordered_map<std::uint64_t, Unchecked> unchecked;

  // Polls the socket without blocking for up to spin_us; a positive count, 0 (peer closed) or -1 (errno set: nothing
  // arrived in time, or an error) as recv returns.
  ssize_t recv_spinning(std::uint8_t* dst, std::size_t room) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
    for (;;) {
      ssize_t r = ::recv(sock.get(), dst, room, MSG_DONTWAIT);
      if (r >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return r;
      if (std::chrono::steady_clock::now() >= deadline) break;
    }
    ssize_t r;
    do {
      r = ::recv(sock.get(), dst, room, 0);
    } while (r < 0 && errno == EINTR);
    return r;
  }

  Status send_all(const std::vector<std::uint8_t>& bytes) {
    std::size_t sent = 0;
    while (sent < bytes.size()) {
      ssize_t n = ::send(sock.get(), bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        int e = errno;
        sock.reset();
        return make_errno_error("epk client: send", e);
      }
      sent += static_cast<std::size_t>(n);
    }
    return {};
  }

  // Reads until one whole frame is buffered and returns it; the frame returned before is dropped from the buffer
  // first (so the returned payload stays valid until the next call).
  Result<Frame> next_frame(std::vector<shm::UniqueFd>* fds) {
    if (rx_drop > 0) {
      std::memmove(rx.data(), rx.data() + rx_drop, rx_have - rx_drop);  // usually 0 bytes: one reply per recv
      rx_have -= rx_drop;
      rx_drop = 0;
    }
    for (;;) {
      if (rx_have >= shm::kHeaderSize) {
        auto h = shm::decode_header(std::span<const std::uint8_t>(rx.data(), rx_have));
        if (!h) {
          sock.reset();
          return make_error(ErrorCode::kBadInput, "epk client: reply from epkd: " + h.error().message);
        }
        std::size_t total = shm::kHeaderSize + h->payload_size;
        if (rx_have >= total) {
          rx_drop = total;
          return Frame{*h, std::span<const std::uint8_t>(rx.data() + shm::kHeaderSize, h->payload_size)};
        }
      }
      Result<std::size_t> n = std::size_t{0};
      if (fds != nullptr) {
        n = shm::recv_with_fds(sock.get(), std::span<std::uint8_t>(rx.data() + rx_have, rx.size() - rx_have), fds);
      } else {
        ssize_t r;
        if (spin_us > 0) {
          r = recv_spinning(rx.data() + rx_have, rx.size() - rx_have);
        } else {
          do {
            r = ::recv(sock.get(), rx.data() + rx_have, rx.size() - rx_have, 0);
          } while (r < 0 && errno == EINTR);
        }
        if (r < 0) {
          n = (errno == EAGAIN || errno == EWOULDBLOCK)
                  ? make_error(ErrorCode::kIo, "epk client: timed out waiting for epkd's reply")
                  : make_errno_error("epk client: recv", errno);
        } else {
          n = static_cast<std::size_t>(r);
        }
      }
      if (!n) {
        sock.reset();
        return std::move(n).error();
      }
      if (*n == 0) {
        sock.reset();
        return make_error(ErrorCode::kIo, "epk client: epkd closed the connection");
      }
      rx_have += *n;
    }
  }

  // A request of `type` with an empty payload (stats, models, close) and its reply. mu held.
  Result<Frame> call_empty(shm::MsgType type) {
    const std::uint32_t id = next_id++;
    shm::encode_empty(id, type, &tx);
    return call(id, type);
  }

  // Sends the request in tx and waits for the reply with its id. An error reply becomes an Error; an error for
  // request 0 means the daemon closed the session.
  Result<Frame> call(std::uint32_t id, shm::MsgType expect, std::vector<shm::UniqueFd>* fds = nullptr) {
    if (!sock.valid()) return make_error(ErrorCode::kIo, "epk client: not connected");
    EPK_TRY(send_all(tx));
    for (;;) {
      EPK_TRY_ASSIGN(Frame f, next_frame(fds));
      if (f.header.type == static_cast<std::uint16_t>(shm::MsgType::kError)) {
        auto e = shm::decode_error(f.payload);
        if (!e) return make_error(ErrorCode::kBadInput, "epk client: " + e.error().message);
        if (f.header.request_id != id && f.header.request_id != 0) {
          if (forget_nowait(f.header.request_id)) ++deferred_release_errors;
          continue;
        }
        if (e->status == shm::WireStatus::kBadMessage || e->status == shm::WireStatus::kBadVersion) sock.reset();
        return make_error(code_for(e->status),
                          std::string("epkd: ") + shm::wire_status_name(e->status) + ": " + e->message);
      }
      if (f.header.request_id != id) continue;  // a reply to an abandoned request
      if (f.header.type != (static_cast<std::uint16_t>(expect) | shm::kReplyBit)) {
        sock.reset();
        return make_error(ErrorCode::kBadInput, std::string("epk client: expected a ") +
                                                    shm::msg_type_name(static_cast<std::uint16_t>(expect)) + " reply");
      }
      return f;
    }
  }
};

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&& other) noexcept {
  if (this != &other) {
    close_nowait();
    impl_ = std::move(other.impl_);
  }
  return *this;
}
Client::~Client() { close_nowait(); }

// Destruction must not wait on the daemon (a stalled or stopped epkd would hang the caller for the reply timeout):
// one non-blocking send of close, then the socket is shut. The daemon drops the pins when the connection goes, close
// message or not.
void Client::close_nowait() noexcept {
  if (impl_ == nullptr) return;
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->sock.valid()) {
    std::uint8_t msg[shm::kHeaderSize];
    shm::encode_header({shm::kProtocolVersion, static_cast<std::uint16_t>(shm::MsgType::kClose), impl_->next_id++, 0},
                       msg);
    (void)::send(impl_->sock.get(), msg, sizeof(msg), MSG_DONTWAIT | MSG_NOSIGNAL);
    ::shutdown(impl_->sock.get(), SHUT_RDWR);
  }
  impl_->sock.reset();
  impl_->pools.clear();
}

bool Client::connected() const { return impl_ != nullptr && impl_->sock.valid(); }

Result<Client> Client::connect(const std::string& socket_path, int reply_timeout_ms) {
  ClientOptions o;
  o.reply_timeout_ms = reply_timeout_ms;
  return connect(socket_path, o);
}

int Client::spin_us() const { return impl_ != nullptr ? impl_->spin_us : 0; }

namespace {

// EPK_SPIN_US: a decimal count of microseconds, 0 to 1 s; unset or empty: the automatic window (shm/spin.h, as
// epkd's); anything else means 0 (no spin).
int spin_from_env() {
  const char* v = std::getenv("EPK_SPIN_US");
  if (v == nullptr || *v == 0) return static_cast<int>(shm::auto_spin_us(std::thread::hardware_concurrency()));
  char* end = nullptr;
  long n = std::strtol(v, &end, 10);
  return (*end == 0 && n > 0 && n <= 1000000) ? static_cast<int>(n) : 0;
}

}  // namespace

Result<Client> Client::connect(const std::string& socket_path, const ClientOptions& options) {
  const int reply_timeout_ms = options.reply_timeout_ms;
  if (options.spin_us > 1000000) return make_error(ErrorCode::kInvalidArgument, "epk client: spin_us over 1 s");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(addr.sun_path)) {
    return make_error(ErrorCode::kInvalidArgument, "epk client: socket path '" + socket_path + "' is too long");
  }
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  auto impl = std::make_unique<Impl>();
  impl->sock.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!impl->sock.valid()) return make_errno_error("epk client: socket", errno);
  if (::connect(impl->sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return make_errno_error("epk client: connect to " + socket_path, errno);
  }
  if (reply_timeout_ms > 0) {
    timeval tv{reply_timeout_ms / 1000, (reply_timeout_ms % 1000) * 1000};
    ::setsockopt(impl->sock.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  impl->rx.resize(shm::kMaxMessage);
  impl->acquire_req.tensor.reserve(shm::kMaxTensorName);
  impl->acquire_reply.shape.reserve(shm::kMaxDims);
  impl->acquire_reply.strides.reserve(shm::kMaxDims);
  impl->spin_us = options.spin_us >= 0 ? options.spin_us : spin_from_env();
  const std::uint32_t id = impl->next_id++;
  shm::encode_hello(id, {static_cast<std::uint32_t>(::getpid()), 0}, &impl->tx);
  std::vector<shm::UniqueFd> fds;
  EPK_TRY_ASSIGN(Frame f, impl->call(id, shm::MsgType::kHello, &fds));
  EPK_TRY_ASSIGN(shm::HelloReply hello, shm::decode_hello_reply(f.payload));
  const std::size_t want_fds = hello.pools.size() + (hello.status_entries != 0 ? 1 : 0);
  if (fds.size() != want_fds) {
    return make_error(ErrorCode::kBadInput, "epk client: hello reply announces " + std::to_string(hello.pools.size()) +
                                                " pools" + (hello.status_entries != 0 ? " and a status table" : "") +
                                                " but carried " + std::to_string(fds.size()) + " fds");
  }
  impl->reply_timeout_ms = reply_timeout_ms;
  impl->status_spin_us = std::clamp(options.status_spin_us, 0, 1000000);
  if (hello.status_entries != 0) {
    EPK_TRY_ASSIGN(impl->status, shm::StatusView::map(std::move(fds.back()), hello.status_entries));
  }
  // Every device pool's ring has the same length, in pool order (docs/PROTOCOL.md, hello).
  std::size_t device_pools = 0;
  for (const shm::PoolInfo& p : hello.pools) device_pools += p.kind == shm::PoolKind::kDevice ? 1 : 0;
  if (device_pools == 0 ? !hello.events.empty() : hello.events.size() % device_pools != 0) {
    return make_error(ErrorCode::kBadInput, "epk client: hello reply: " + std::to_string(hello.events.size()) +
                                                " events do not split into " + std::to_string(device_pools) +
                                                " device pools' rings");
  }
  const auto ring = static_cast<std::uint32_t>(device_pools == 0 ? 0 : hello.events.size() / device_pools);
  std::uint32_t next_event = 0;
  impl->ring_length = ring;
  for (std::size_t i = 0; i < hello.pools.size(); ++i) {
    const shm::PoolInfo& p = hello.pools[i];
    if (p.pool_id >= shm::kMaxPools || (i > 0 && p.pool_id <= hello.pools[i - 1].pool_id) || p.size == 0) {
      return make_error(ErrorCode::kBadInput, "epk client: hello reply: pool ids out of order (or a pool of size 0)");
    }
    const std::size_t slots = std::size_t{p.pool_id} + 1;
    impl->pools.resize(slots);
    impl->pool_info.resize(slots);  // gaps: size 0
    impl->device_base.resize(slots, 0);
    impl->ring_first.resize(slots, 0);
    impl->ring_first[p.pool_id] = next_event;
    if (p.kind == shm::PoolKind::kDevice) {
      if (!impl->device) {
        EPK_TRY_ASSIGN(impl->device, DeviceSide::create(hello.events));
      }
      EPK_TRY_ASSIGN(impl->device_base[p.pool_id],
                     impl->device->import_pool(p.pool_id, std::move(fds[i]), p.size, p.device, next_event, ring));
      next_event += ring;
    } else {
      EPK_TRY_ASSIGN(impl->pools[p.pool_id], shm::ImportedPool::import_host(std::move(fds[i]), p.size));
    }
    impl->pool_info[p.pool_id] = p;
  }
  return Client(std::move(impl));
}

Result<std::uint32_t> Client::open_model(const std::string& model) {
  if (impl_ == nullptr) return make_error(ErrorCode::kIo, "epk client: not connected");
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->model_ids.find(model);
  if (it != impl_->model_ids.end()) return it->second;
  if (model.size() > shm::kMaxModelName)
    return make_error(ErrorCode::kInvalidArgument, "epk client: model name too long");
  const std::uint32_t id = impl_->next_id++;
  shm::encode_open_model(id, {model}, &impl_->tx);
  EPK_TRY_ASSIGN(Frame f, impl_->call(id, shm::MsgType::kOpenModel));
  EPK_TRY_ASSIGN(shm::OpenModelReply r, shm::decode_open_model_reply(f.payload));
  impl_->model_ids.emplace(model, r.model_id);
  return r.model_id;
}

Result<Tensor> Client::acquire(const std::string& model, const std::string& tensor, shm::Layout layout,
                               std::uint32_t device, const shm::ShardSpec& shard) {
  Tensor t;
  EPK_TRY(acquire_into(model, tensor, layout, device, shard, &t));
  return t;
}

bool Client::forget_gone_model(const std::string& model, const Error& e) {
  // The prefix call() gives an error reply of status kModelGone.
  if (e.message.rfind(std::string("epkd: ") + shm::wire_status_name(shm::WireStatus::kModelGone) + ":", 0) != 0) {
    return false;
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->model_ids.erase(model);
  return true;
}

Status Client::acquire_into(const std::string& model, const std::string& tensor, shm::Layout layout,
                            std::uint32_t device, const shm::ShardSpec& shard, Tensor* out) {
  Status st = acquire_once(model, tensor, layout, device, shard, out);
  if (!st && forget_gone_model(model, st.error())) return acquire_once(model, tensor, layout, device, shard, out);
  return st;
}

Status Client::acquire_once(const std::string& model, const std::string& tensor, shm::Layout layout,
                            std::uint32_t device, const shm::ShardSpec& shard, Tensor* out) {
  if (impl_ == nullptr) return make_error(ErrorCode::kIo, "epk client: not connected");
  if (tensor.size() > shm::kMaxTensorName)
    return make_error(ErrorCode::kInvalidArgument, "epk client: tensor name too long");
  if (!shard.whole()) EPK_TRY(check_shard_fields(shard));
  std::unique_lock<std::mutex> lock(impl_->mu);
  // A model opened before (every hit) is looked up under the same lock hold as the request; a new one is opened first.
  std::uint32_t model_id = 0;
  if (auto it = impl_->model_ids.find(model); it != impl_->model_ids.end()) {
    model_id = it->second;
  } else {
    lock.unlock();
    EPK_TRY_ASSIGN(model_id, open_model(model));
    lock.lock();
  }
  const std::uint32_t id = impl_->next_id++;
  shm::AcquireRequest& req = impl_->acquire_req;
  req.model_id = model_id;
  req.layout = layout;
  req.tensor.assign(tensor);  // within its reserved capacity
  req.device = device;
  req.shard = shard;
  shm::encode_acquire(id, req, &impl_->tx);
  EPK_TRY_ASSIGN(Frame f, impl_->call(id, shm::MsgType::kAcquire));
  shm::AcquireReply& r = impl_->acquire_reply;
  EPK_TRY(shm::decode_acquire_reply(f.payload, &r));
  if (r.pool_id >= impl_->pools.size() || impl_->pool_info[r.pool_id].size == 0)
    return make_error(ErrorCode::kBadInput, "epk client: acquire reply: bad pool id");
  const shm::PoolInfo& info = impl_->pool_info[r.pool_id];
  if (r.offset > info.size || r.bytes > info.size - r.offset) {
    return make_error(ErrorCode::kBadInput, "epk client: acquire reply: slot past the end of its pool");
  }
  auto dtype = dtype_from_code(r.dtype);
  if (!dtype) return make_error(ErrorCode::kBadInput, "epk client: acquire reply: unknown dtype");
  Tensor& t = *out;
  t.event = nullptr;
  t.row_scales = nullptr;
  t.parts.clear();
  if (info.kind == shm::PoolKind::kDevice) {
    t.data = reinterpret_cast<void*>(impl_->device_base[r.pool_id] + r.offset);
    t.on_device = true;
    t.device = info.device;
    if (r.done_event != shm::kNoEvent) {
      const std::uint32_t first = impl_->ring_first[r.pool_id];
      if (r.done_event < first || r.done_event - first >= impl_->ring_length) {
        return make_error(ErrorCode::kBadInput, "epk client: acquire reply: done_event " +
                                                    std::to_string(r.done_event) + " is not in pool " +
                                                    std::to_string(r.pool_id) + "'s ring");
      }
      EPK_TRY_ASSIGN(t.event, impl_->device->event(r.done_event, info.device));
    }
  } else {
    if (r.done_event != shm::kNoEvent) {
      return make_error(ErrorCode::kBadInput, "epk client: acquire reply: an event for a host pool slot");
    }
    t.data = impl_->pools[r.pool_id].data() + r.offset;
    t.on_device = false;
    t.device = -1;
  }
  t.bytes = r.bytes;
  t.dtype = *dtype;
  t.shape.assign(r.shape.begin(), r.shape.end());  // reuses out's capacity: no allocation for a reused Tensor
  t.strides.assign(r.strides.begin(), r.strides.end());
  t.handle = r.handle;
  if (r.status_ticket != shm::kNoTicket) {
    if (!impl_->status.valid() || !t.on_device) {
      return make_error(ErrorCode::kBadInput, "epk client: acquire reply: a status ticket without a status table");
    }
    impl_->unchecked[r.handle] = {r.status_ticket, tensor};
  }
  if (shm::is_rowwise(layout)) {
    std::uint64_t values = 0;
    if (t.shape.size() != 2 || !checked_mul(t.shape[0], t.shape[1], &values) || values > t.bytes ||
        t.shape[0] > t.bytes / sizeof(float) ||
        shm::rowwise_scales_offset(t.shape[0], t.shape[1]) + t.shape[0] * sizeof(float) != t.bytes) {
      return make_error(ErrorCode::kBadInput, "epk client: acquire reply: rowwise slot size does not match its shape");
    }
    t.row_scales = reinterpret_cast<const float*>(static_cast<std::uint8_t*>(t.data) +
                                                  shm::rowwise_scales_offset(t.shape[0], t.shape[1]));
  }
  if (shm::is_packed_int(layout)) {
    EPK_TRY_ASSIGN(t.parts, packed_parts_of(layout, t.data, t.bytes, t.dtype, t.shape));
  }
  return {};
}

// An early-answered slot (a non-zero status ticket): waits on the CPU until epkd has published its decode's outcome. A
// failed decode (a corrupt tile, a device error) is an error naming the tensor, and the bytes must not be read: epkd
// dropped the slot (and this client's pin on it). The lock is not held while waiting.
Status Client::check_decoded(std::uint64_t handle) {
  Impl::Unchecked u;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = impl_->unchecked.find(handle);
    if (it == impl_->unchecked.end()) return {};  // answered after its decode was checked, or already seen ok
    u = it->second;
  }
  EPK_TRY_ASSIGN(shm::DecodeState st, impl_->status.wait(u.ticket, std::max(impl_->spin_us, impl_->status_spin_us),
                                                                  impl_->reply_timeout_ms));
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (st == shm::DecodeState::kOk) {
    impl_->unchecked.erase(handle);
    return {};
  }
  if (st == shm::DecodeState::kFailed) {
    return make_error(ErrorCode::kCorruptTile, "epk client: tensor '" + u.tensor +
                                                   "': epkd's decode of it failed (a corrupt tile or a device error: "
                                                   "epkd's log names it); the slot was dropped, do not read it");
  }
  return make_error(ErrorCode::kInternal, "epk client: tensor '" + u.tensor + "': its decode status was overwritten (" +
                                              std::to_string(impl_->status.entries()) +
                                              " decodes since its acquire): release and acquire it again");
}

Status Client::wait(const Tensor& t, void* stream) {
  if (!t.on_device) return {};  // host slots are ready when acquire returns
  if (impl_ == nullptr) return make_error(ErrorCode::kIo, "epk client: not connected");
  EPK_TRY(check_decoded(t.handle));  // first: a ticket is checked even if a reply came without an event
  if (t.event == nullptr) return {};
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (!impl_->device) return make_error(ErrorCode::kInvalidArgument, "epk client: no device pool");
  return impl_->device->wait(t.event, stream);
}

Status Client::copy_to_host(const Tensor& t, void* dst) {
  if (!t.on_device) {
    std::memcpy(dst, t.data, t.bytes);
    return {};
  }
  if (impl_ == nullptr) return make_error(ErrorCode::kIo, "epk client: not connected");
  EPK_TRY(check_decoded(t.handle));
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (!impl_->device) return make_error(ErrorCode::kInvalidArgument, "epk client: no device pool");
  return impl_->device->copy_to_host(dst, reinterpret_cast<std::uint64_t>(t.data), t.bytes, t.event, t.device);
}

Status Client::release_after(std::uint64_t handle, void* stream) {
  if (impl_ == nullptr) return make_error(ErrorCode::kIo, "epk client: not connected");
  std::unique_lock<std::mutex> lock(impl_->mu);
  if (!impl_->device) {
    lock.unlock();
    return release(handle);  // host pools: the release message is the fence
  }
  // The handle names its pool (shm::handle_pool); that pool's device records the fence.
  const std::uint32_t pool = shm::handle_pool(handle);
  if (pool >= impl_->pool_info.size() || impl_->pool_info[pool].kind != shm::PoolKind::kDevice) {
    lock.unlock();
    return release(handle);  // a host pool slot (or a handle the daemon will refuse)
  }
  const int device = impl_->pool_info[pool].device;
  // A stream with nothing left to run has finished every read of the slot: the release message is then the fence,
  // and no event is recorded in this process's context. Without MPS such a record makes the GPU switch to this
  // context between two of epkd's decodes: about 250 us per miss on the H200 (docs/NOTES.md, Measurements, the
  // runs of merged main on two H200s).
  EPK_TRY_ASSIGN(const bool idle, impl_->device->stream_idle(stream, device));
  if (idle) {
    lock.unlock();
    return release(handle);
  }
  impl_->unchecked.erase(handle);
  shm::ReleaseRequest m{handle, shm::FenceKind::kCudaEvent, 0};
  EPK_TRY_ASSIGN(m.event, impl_->device->record_release(stream, device));
  const std::uint32_t id = impl_->next_id++;
  shm::encode_release(id, m, &impl_->tx);
  EPK_TRY_ASSIGN(Frame f, impl_->call(id, shm::MsgType::kRelease));
  return shm::decode_empty(f.payload, "release reply");
}

Result<std::vector<Tensor::Part>> packed_parts_of(shm::Layout layout, const void* data, std::uint64_t bytes,
                                                  DType dtype, std::span<const std::uint64_t> shape) {
  auto g = shm::packed_geometry_from_shape(shape);
  std::array<shm::PackedPart, shm::kMaxPackedParts> parts{};
  std::uint64_t total = 0;
  const std::size_t n = g ? shm::packed_parts(layout, *g, dtype, &parts, &total) : 0;
  if (n == 0 || total != bytes) {
    return make_error(ErrorCode::kBadInput, "epk client: acquire reply: the " + std::string(shm::layout_name(layout)) +
                                                " descriptor does not describe its slot");
  }
  std::vector<Tensor::Part> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    out[i].name = parts[i].name;
    out[i].dtype = parts[i].dtype;
    out[i].shape.assign(parts[i].shape.begin(), parts[i].shape.begin() + parts[i].ndim);
    out[i].data = static_cast<const std::uint8_t*>(data) + parts[i].offset;
    out[i].bytes = parts[i].bytes;
  }
  return out;
}

Result<std::uint32_t> Client::prefetch(const std::string& model, const std::vector<std::string>& tensors,
                                       shm::Layout layout, std::uint32_t device, const shm::ShardSpec& shard) {
  Result<std::uint32_t> r = prefetch_once(model, tensors, layout, device, shard);
  if (!r && forget_gone_model(model, r.error())) return prefetch_once(model, tensors, layout, device, shard);
  return r;
}

Result<std::uint32_t> Client::prefetch_once(const std::string& model, const std::vector<std::string>& tensors,
                                            shm::Layout layout, std::uint32_t device, const shm::ShardSpec& shard) {
  if (!shard.whole()) EPK_TRY(check_shard_fields(shard));
  EPK_TRY_ASSIGN(std::uint32_t model_id, open_model(model));
  if (tensors.size() > shm::kMaxPrefetch) {
    return make_error(ErrorCode::kInvalidArgument, "epk client: prefetch of more than 256 tensors in one call");
  }
  std::size_t total = 12 + 24;  // with the shard block (docs/PROTOCOL.md, prefetch)
  for (const auto& t : tensors) {
    if (t.size() > shm::kMaxTensorName)
      return make_error(ErrorCode::kInvalidArgument, "epk client: tensor name too long");
    total += 2 + t.size();
  }
  if (total > shm::kMaxPayload) return make_error(ErrorCode::kInvalidArgument, "epk client: prefetch names too long");
  std::lock_guard<std::mutex> lock(impl_->mu);
  const std::uint32_t id = impl_->next_id++;
  shm::encode_prefetch(id, {model_id, layout, tensors, device, shard}, &impl_->tx);
  EPK_TRY_ASSIGN(Frame f, impl_->call(id, shm::MsgType::kPrefetch));
  EPK_TRY_ASSIGN(shm::PrefetchReply r, shm::decode_prefetch_reply(f.payload));
  return r.queued;
}

Status Client::release(std::uint64_t handle) {
  if (impl_ == nullptr) return make_error(ErrorCode::kIo, "epk client: not connected");
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (!impl_->unchecked.empty()) impl_->unchecked.erase(handle);
  const std::uint32_t id = impl_->next_id++;
  shm::encode_release(id, {handle, shm::FenceKind::kHostRelease}, &impl_->tx);
  EPK_TRY_ASSIGN(Frame f, impl_->call(id, shm::MsgType::kRelease));
  return shm::decode_empty(f.payload, "release reply");
}

Status Client::release_nowait(std::uint64_t handle) {
  if (impl_ == nullptr) return make_error(ErrorCode::kIo, "epk client: not connected");
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (!impl_->sock.valid()) return make_error(ErrorCode::kIo, "epk client: not connected");
  if (!impl_->unchecked.empty()) impl_->unchecked.erase(handle);
  const std::uint32_t id = impl_->next_id++;
  shm::encode_release(id, {handle, shm::FenceKind::kHostRelease, shm::kReleaseNoReply}, &impl_->tx);
  impl_->remember_nowait(id);  // only ids that may come back are remembered
  return impl_->send_all(impl_->tx);
}

std::uint64_t Client::deferred_release_errors() const {
  if (impl_ == nullptr) return 0;
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->deferred_release_errors;
}

Result<Stats> Client::stats() {
  if (impl_ == nullptr) return make_error(ErrorCode::kIo, "epk client: not connected");
  std::lock_guard<std::mutex> lock(impl_->mu);
  EPK_TRY_ASSIGN(Frame f, impl_->call_empty(shm::MsgType::kStats));
  return shm::decode_stats_reply(f.payload);
}

Result<Client::StoredFds> Client::open_stored(const std::string& model, std::uint32_t device) {
  Result<StoredFds> r = open_stored_once(model, device);
  if (!r && forget_gone_model(model, r.error())) return open_stored_once(model, device);
  return r;
}

Result<Client::StoredFds> Client::open_stored_once(const std::string& model, std::uint32_t device) {
  EPK_TRY_ASSIGN(std::uint32_t model_id, open_model(model));
  std::lock_guard<std::mutex> lock(impl_->mu);
  const std::uint32_t id = impl_->next_id++;
  shm::encode_open_stored(id, {model_id, device}, &impl_->tx);
  std::vector<shm::UniqueFd> fds;
  EPK_TRY_ASSIGN(Frame f, impl_->call(id, shm::MsgType::kOpenStored, &fds));
  EPK_TRY_ASSIGN(shm::OpenStoredReply r, shm::decode_open_stored_reply(f.payload));
  if (fds.size() != 2) {
    return make_error(ErrorCode::kBadInput, "epk client: open_stored reply carried " + std::to_string(fds.size()) +
                                                " fds, not 2");
  }
  return StoredFds{std::move(fds[0]), std::move(fds[1]), r.tier_bytes};
}

Result<std::vector<shm::TensorInfo>> Client::tensors(const std::string& model) {
  Result<std::vector<shm::TensorInfo>> r = tensors_once(model);
  if (!r && forget_gone_model(model, r.error())) return tensors_once(model);
  return r;
}

Result<std::vector<shm::TensorInfo>> Client::tensors_once(const std::string& model) {
  EPK_TRY_ASSIGN(std::uint32_t model_id, open_model(model));
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<shm::TensorInfo> all;
  for (;;) {
    const std::uint32_t id = impl_->next_id++;
    shm::encode_tensors(id, {model_id, static_cast<std::uint32_t>(all.size())}, &impl_->tx);
    EPK_TRY_ASSIGN(Frame f, impl_->call(id, shm::MsgType::kTensors));
    EPK_TRY_ASSIGN(shm::TensorsReply r, shm::decode_tensors_reply(f.payload));
    if (r.tensors.empty() && all.size() < r.total) {
      return make_error(ErrorCode::kBadInput, "epk client: tensors reply made no progress at " +
                                                  std::to_string(all.size()) + " of " + std::to_string(r.total));
    }
    for (shm::TensorInfo& t : r.tensors) all.push_back(std::move(t));
    if (all.size() >= r.total) return all;
  }
}

Result<shm::ModelsReply> Client::models() {
  if (impl_ == nullptr) return make_error(ErrorCode::kIo, "epk client: not connected");
  std::lock_guard<std::mutex> lock(impl_->mu);
  EPK_TRY_ASSIGN(Frame f, impl_->call_empty(shm::MsgType::kModels));
  return shm::decode_models_reply(f.payload);
}

std::vector<shm::PoolInfo> Client::pools() const {
  if (impl_ == nullptr) return {};
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<shm::PoolInfo> pools;
  for (const shm::PoolInfo& p : impl_->pool_info) {
    if (p.size != 0) pools.push_back(p);
  }
  return pools;
}

void Client::disconnect() {
  if (impl_ == nullptr) return;
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->sock.valid()) {
    (void)impl_->call_empty(shm::MsgType::kClose);  // best effort: the daemon drops pins either way
  }
  impl_->sock.reset();
  impl_->pools.clear();
  impl_->device.reset();  // events and device mappings (the daemon's slots) go with the connection
}

}  // namespace epk::client
