// The pieces of the module epk._epk (epk_ext.cc): each binds one area's Python classes.
#pragma once

#include <nanobind/nanobind.h>

#include <memory>
#include <string>

#include "shm/layout.h"

namespace epk::py {

inline constexpr const char* kDefaultSocket = "/run/epkd/epkd.sock";  // systemd/epkd.socket's ListenStream

// epk.Shard (shm/shard.h's ShardSpec).
void bind_shard(nanobind::module_& m);
// epk.Lease and epk.Part: the leases' properties, their DLPack export and their release.
void bind_lease(nanobind::module_& m);
// epk.Client: the connection and its calls.
void bind_client(nanobind::module_& m);
// epk.stored.StoredTier and DecodeBatch: client-side decode over a Client's connection (or, in a build without it,
// the reason why, as _epk.CLIENT_DECODE_MISSING).
void bind_stored(nanobind::module_& m);

struct ClientCore;
// The connection of an epk.Client; epk.InvalidArgument for anything else.
std::shared_ptr<ClientCore> client_core(nanobind::handle client);
// A layout by its name (shm/layout.h); epk.InvalidArgument listing the known names otherwise.
shm::Layout parse_layout(const std::string& name);

}  // namespace epk::py
