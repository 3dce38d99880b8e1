// What a session hands its decoded requests to. The service (daemon/service/service.h) implements it; sessions know
// only this interface, so net/ does not include the service while the service's handlers take the Session they
// answer. Every call runs on the calling session's io thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <vector>

#include "daemon/cache/cache.h"
#include "shm/protocol.h"

namespace epk::daemon::server {

class Session;

class RequestHandler {
 public:
  virtual ~RequestHandler() = default;

  // The hello reply and the pool fds it carries: the pools of the session's trust domain only.
  virtual shm::HelloReply hello_reply(std::uint32_t domain) const = 0;
  virtual std::vector<int> pool_fds(std::uint32_t domain) const = 0;
  // The session ended (once): its pins go.
  virtual void client_gone(ClientId id, uid_t uid) = 0;

  // Each answers `s` at once or later (an uncached acquire, from the decode worker).
  virtual void on_open_model(Session& s, std::uint32_t req, const shm::OpenModelRequest& m) = 0;
  virtual void on_acquire(Session& s, std::uint32_t req, const shm::AcquireRequest& m) = 0;
  virtual void on_prefetch(Session& s, std::uint32_t req, const shm::PrefetchRequest& m) = 0;
  virtual void on_release(Session& s, std::uint32_t req, const shm::ReleaseRequest& m) = 0;
  virtual void on_open_stored(Session& s, std::uint32_t req, const shm::OpenStoredRequest& m) = 0;
  virtual void on_stats(Session& s, std::uint32_t req) = 0;
  virtual void on_models(Session& s, std::uint32_t req) = 0;
  virtual void on_tensors(Session& s, std::uint32_t req, const shm::TensorsRequest& m) = 0;
};

}  // namespace epk::daemon::server
