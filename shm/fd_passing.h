// Passing fds over a Unix stream socket with SCM_RIGHTS. Pools are passed once per client, in the hello reply.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "codec/common/result.h"
#include "shm/unique_fd.h"

namespace epk::shm {

// Every pool (kMaxPools = 16) and the decode status table (the hello reply's fds).
inline constexpr std::size_t kMaxPassedFds = 17;

// Sends all of `bytes` on a blocking or non-blocking stream socket; the fds ride on the first byte. Waits (poll) while
// the socket is full, up to `timeout_ms` in all.
Status send_with_fds(int sock, std::span<const std::uint8_t> bytes, std::span<const int> fds, int timeout_ms);

// One recvmsg of up to buf.size() bytes; received fds (close-on-exec) are appended to `fds`. Returns the byte count
// (0 at end of stream). Refuses more than kMaxPassedFds or a truncated control message (the fds that did arrive are
// closed).
Result<std::size_t> recv_with_fds(int sock, std::span<std::uint8_t> buf, std::vector<UniqueFd>* fds);

}  // namespace epk::shm
