// libepk's private side of a Client (client.h): one connection's socket, its request/reply framing, the receive
// buffer and the pools the hello mapped. Included by libepk's own sources only (client_impl.cc: the framing;
// client_session.cc, client_acquire.cc, client_admin.cc: Client's members); users of client.h never see it.
// Every member is guarded by `mu`, except those connect() sets once before the Client exists (spin_us,
// reply_timeout_ms, status_spin_us, status), which are read without it.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "client/client.h"
#include "client/device_client.h"
#include "shm/decode_status.h"
#include "shm/pool.h"
#include "shm/protocol.h"
#include "shm/unique_fd.h"

namespace epk::client {

// A reply frame as received: the payload is a view into the client's receive buffer, valid until the next
// next_frame() (callers decode it at once). No copy and no allocation per reply.
struct Frame {
  shm::FrameHeader header;
  std::span<const std::uint8_t> payload;
};

// Hidden: libepk's own type, not exported from libepk.so, so its members are called directly (no PLT) from the
// library's other files.
struct [[gnu::visibility("hidden")]] Client::Impl {
  std::mutex mu;
  shm::UniqueFd sock;
  std::vector<shm::ImportedPool> pools;
  // By pool id. The hello lists the pools of this client's trust domain only, so ids may have gaps: a gap's entry has
  // size 0 (a real pool never does) and nothing mapped.
  std::vector<shm::PoolInfo> pool_info;  // as the hello reply announced them
  std::vector<DeviceAddress> device_base;  // device pools: the mapped base address (null for host pools)
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
  ssize_t recv_spinning(std::uint8_t* dst, std::size_t room);
  // Sends every byte (the socket is dropped on an error).
  Status send_all(const std::vector<std::uint8_t>& bytes);
  // Reads until one whole frame is buffered and returns it; the frame returned before is dropped from the buffer
  // first (so the returned payload stays valid until the next call).
  Result<Frame> next_frame(std::vector<shm::UniqueFd>* fds);
  // A request of `type` with an empty payload (stats, models, close) and its reply. mu held.
  Result<Frame> call_empty(shm::MsgType type);
  // Sends the request in tx and waits for the reply with its id. An error reply becomes an Error; an error for
  // request 0 means the daemon closed the session. mu held.
  Result<Frame> call(std::uint32_t id, shm::MsgType expect, std::vector<shm::UniqueFd>* fds = nullptr);
};

}  // namespace epk::client
