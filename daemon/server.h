// epkd's process: Asio on a Unix socket, one io_context per io thread with the sessions spread over them
// (daemon/net/session.h), and the service they share (daemon/service/service.h): the registry, the caches (one per pool, each
// under its lane lock) and the decode schedulers. Decodes run on the schedulers' workers, which complete them and
// post the replies to the sessions' threads, so acquire and release never wait for a decode; cache hits and releases
// take only their lane's lock (daemon/cache/lane_lock.h).
#pragma once

#include "daemon/config/config.h"

namespace epk::daemon {

// Runs the daemon in the foreground until SIGTERM or SIGINT (drain in-flight decodes, answer or close every session,
// remove the socket, return 0). SIGHUP re-reads the models from the config file and opens new ones. Returns 1 when it
// cannot start (socket in use, no pool, no decode status table for the device pools, no model opened).
int run_daemon(const DaemonConfig& cfg);

}  // namespace epk::daemon
