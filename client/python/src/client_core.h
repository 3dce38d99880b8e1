// The connection shared by a Python Client and its leases.
//
// Ownership. A Client holds a shared ClientCore (the libepk connection and its pool mappings); every Lease holds the
// same core, so the mappings outlive the last lease object (and every array made from one: a DLPack capsule keeps its
// lease alive). Client.close() releases every pin at once, but the socket (and the mappings) go only when the last
// lease object does.
//
// Threads. Every libepk call runs without the GIL and under ClientCore::mu, so one Client may be shared by threads
// (calls are serialised, as in libepk) and close() cannot race a call.
#pragma once

#include <nanobind/nanobind.h>

#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>

#include "client/client.h"
#include "errors.h"

namespace epk::py {

struct Lease;

struct ClientCore {
  std::mutex mu;                         // one libepk call at a time; guards everything below
  std::optional<client::Client> client;  // connected at construction; kept until the core goes (mappings)
  std::string socket;
  bool closed = false;                   // close() was called: no further calls
  std::unordered_set<Lease*> leases;     // unreleased leases
};

// Runs f(client) without the GIL and under mu; raises (with the GIL) on error.
template <class F>
auto call(ClientCore& core, F&& f) {
  using R = decltype(f(*core.client));
  std::optional<R> r;
  bool gone = false;
  {
    nanobind::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(core.mu);
    if (!core.closed) {
      r.emplace(f(*core.client));
      gone = !core.client->connected();
    }
  }
  if (!r) raise_closed();
  if (!*r) raise_error(r->error(), gone);
  return std::move(*r);
}

}  // namespace epk::py
