// systemd integration without libsystemd: readiness notification over $NOTIFY_SOCKET (sd_notify(3)'s datagram
// protocol) and socket activation ($LISTEN_PID / $LISTEN_FDS, sd_listen_fds(3)). Both are no-ops outside systemd.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "codec/common/result.h"
#include "shm/protocol.h"
#include "shm/unique_fd.h"

namespace epk::daemon {

// Sends `state` ("READY=1", "STOPPING=1", "STATUS=...", lines joined by '\n') to $NOTIFY_SOCKET: a path, or an
// abstract socket when it starts with '@'. Returns false (and does nothing) when the variable is unset; an error when
// it is set but the datagram cannot be sent.
Result<bool> sd_notify_send(std::string_view state);

// Whether $NOTIFY_SOCKET is set (epkd runs under a Type=notify unit, or a test plays systemd).
bool notify_socket_set();

// The watchdog systemd asked for (sd_watchdog_enabled(3)): $WATCHDOG_USEC when $WATCHDOG_PID is unset or names this
// process; nullopt when unset or meant for another process; an error when either is not a positive number.
Result<std::optional<std::chrono::microseconds>> watchdog_timeout();

// How often epkd sends STATUS= (and WATCHDOG=1 when `watchdog` is set): half the watchdog timeout, as sd_notify(3)
// advises, at most kStatusPeriod; at least 1 ms.
inline constexpr std::chrono::milliseconds kStatusPeriod{5000};
std::chrono::microseconds status_period(std::optional<std::chrono::microseconds> watchdog);

// The STATUS= text (one line, `systemctl status` shows it): models, clients (every open session), then per pool its
// bytes used of its budget, pinned bytes, cached slots, hits and misses. "1.5 MiB" style sizes.
std::string status_text(const shm::StatsReply& s);

// The listening socket systemd passed, when $LISTEN_PID is this process: exactly one fd (3), an AF_UNIX stream socket
// that listens; anything else is an error naming what was wrong. nullopt when not socket-activated. The variables are
// removed from the environment so children do not inherit them; the fd is made close-on-exec.
Result<std::optional<shm::UniqueFd>> systemd_listen_fd();

}  // namespace epk::daemon
