// systemd integration without libsystemd: readiness notification over $NOTIFY_SOCKET (sd_notify(3)'s datagram
// protocol) and socket activation ($LISTEN_PID / $LISTEN_FDS, sd_listen_fds(3)). Both are no-ops outside systemd.
#pragma once

#include <optional>
#include <string_view>

#include "codec/common/result.h"
#include "shm/unique_fd.h"

namespace epk::daemon {

// Sends `state` ("READY=1", "STOPPING=1", "STATUS=...", lines joined by '\n') to $NOTIFY_SOCKET: a path, or an
// abstract socket when it starts with '@'. Returns false (and does nothing) when the variable is unset; an error when
// it is set but the datagram cannot be sent.
Result<bool> sd_notify_send(std::string_view state);

// The listening socket systemd passed, when $LISTEN_PID is this process: exactly one fd (3), an AF_UNIX stream socket
// that listens; anything else is an error naming what was wrong. nullopt when not socket-activated. The variables are
// removed from the environment so children do not inherit them; the fd is made close-on-exec.
Result<std::optional<shm::UniqueFd>> systemd_listen_fd();

}  // namespace epk::daemon
