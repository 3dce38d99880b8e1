// epkd's server: the Asio event loop on a Unix socket, one session per client, the service that joins the registry,
// the cache and the decode scheduler. Everything that touches the cache runs on the one event-loop thread; decodes run
// on the scheduler's workers and post their completion back, so acquire and release never wait for a decode.
#pragma once

#include "daemon/config.h"

namespace epk::daemon {

// Runs the daemon in the foreground until SIGTERM or SIGINT (drain in-flight decodes, answer or close every session,
// remove the socket, return 0). SIGHUP re-reads the models from the config file and opens new ones. Returns 1 when it
// cannot start (socket in use, no pool, no model opened).
int run_daemon(const DaemonConfig& cfg);

}  // namespace epk::daemon
