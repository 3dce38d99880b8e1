// Client's admin calls (client.h): the daemon's counters, the models and their tensors, the pools announced at
// connect, and the fds of client-side decode (open_stored).
#include <string>
#include <utility>

#include "client/client_impl.h"

namespace epk::client {

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
  // The file, then the tier (a device pool, or the host tier's memfd).
  if (fds.size() != 2) {
    return make_error(ErrorCode::kBadInput, "epk client: open_stored reply carried " + std::to_string(fds.size()) +
                                                " fds, not 2");
  }
  if (r.where != static_cast<std::uint32_t>(shm::TierWhere::kDevice) &&
      r.where != static_cast<std::uint32_t>(shm::TierWhere::kHost)) {
    return make_error(ErrorCode::kBadInput, "epk client: open_stored reply names tier place " +
                                                std::to_string(r.where) + ", neither device (0) nor host (1)");
  }
  return StoredFds{std::move(fds[0]), std::move(fds[1]), r.tier_bytes,
                   r.where == static_cast<std::uint32_t>(shm::TierWhere::kHost)};
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

}  // namespace epk::client
