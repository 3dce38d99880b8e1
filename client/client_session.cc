// Client's session (client.h): connect and its hello (the pools, the event rings, the decode status table), the
// reply options, the model id cache, and the two ways a connection ends (disconnect, and close_nowait for the
// destructor and move assignment).
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "client/client_impl.h"
#include "shm/spin.h"

namespace epk::client {

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
    impl->device_base.resize(slots);
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

bool Client::forget_gone_model(const std::string& model, const Error& e) {
  // The prefix call() gives an error reply of status kModelGone.
  if (e.message.rfind(std::string("epkd: ") + shm::wire_status_name(shm::WireStatus::kModelGone) + ":", 0) != 0) {
    return false;
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->model_ids.erase(model);
  return true;
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
