// The pieces of the module epk._epk (epk_ext.cc): each binds one area's Python classes.
#pragma once

#include <nanobind/nanobind.h>

namespace epk::py {

inline constexpr const char* kDefaultSocket = "/run/epkd/epkd.sock";  // systemd/epkd.socket's ListenStream

// epk.Shard (shm/shard.h's ShardSpec).
void bind_shard(nanobind::module_& m);
// epk.Lease and epk.Part: the leases' properties, their DLPack export and their release.
void bind_lease(nanobind::module_& m);
// epk.Client: the connection and its calls.
void bind_client(nanobind::module_& m);

}  // namespace epk::py
