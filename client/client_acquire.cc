// Client's acquire and release path (client.h): acquire (the reply checked against the pools and turned into a
// Tensor), the decode check of early-answered device slots (wait, copy_to_host), prefetch, the three releases, and
// packed_parts_of.
#include <algorithm>
#include <array>
#include <cstring>
#include <string>

#include "client/client_impl.h"
#include "codec/common/bytes.h"
#include "shm/layout.h"

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

}  // namespace

Result<Tensor> Client::acquire(const std::string& model, const std::string& tensor, shm::Layout layout,
                               std::uint32_t device, const shm::ShardSpec& shard) {
  Tensor t;
  EPK_TRY(acquire_into(model, tensor, layout, device, shard, &t));
  return t;
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
    t.data = (impl_->device_base[r.pool_id] + r.offset).as<void>();
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
  return impl_->device->copy_to_host(dst, DeviceAddress::of(t.data), t.bytes, t.event, t.device);
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
  // context between two of epkd's decodes, a large cost per miss (docs/measurements/acquire-latency.md).
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

}  // namespace epk::client
