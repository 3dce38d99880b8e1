// A lease: one pinned slot of epkd's cache held by a Python Client (client_core.h), and the array views made of it.
// Its release fences (a stream event for device slots, the release message for host ones) and the stream rule of
// its exports (__dlpack__) are here; the Python class is bound in lease_bindings.cc.
#pragma once

#include <nanobind/nanobind.h>

#include <memory>
#include <string>

#include "client/client.h"
#include "client_core.h"
#include "dlpack_export.h"
#include "shm/layout.h"

namespace epk::py {

struct Lease {
  std::shared_ptr<ClientCore> core;
  client::Tensor t;
  std::string model, tensor;
  shm::Layout layout = shm::Layout::kStored;
  bool released = false;  // guarded by core->mu once registered

  ~Lease() { release_unreferenced(); }

  bool live() const { return !released; }

  // Collection of an unreleased lease (no array made from it is left: each holds the lease). Kernels queued before
  // may still read a device slot, and nobody said on which stream: the device is synchronised first, then the slot is
  // released with a host fence. A host slot is released at once. Neither waits for epkd's answer.
  void release_unreferenced() noexcept;

  // Lease.release(after): device slots fence on the stream `after` names (cuda_streams.h, release_stream), host
  // slots with the release message. Idempotent; nothing to do once the connection is lost (epkd dropped the pins).
  void release(nanobind::handle after);

  // Raises epk.Released once the lease was released.
  void check_live() const;

  // The consumer's stream waits for the decode (device slots), by the DLPack stream rule.
  void sync_for(nanobind::handle stream);

  DLDevice dl_device() const { return t.on_device ? DLDevice{kDLCUDA, t.device} : DLDevice{kDLCPU, 0}; }

  // The lease's own array: the tensor (dense, stored) or the rowwise values; none for packed layouts.
  ArrayView main_view() const;
};

}  // namespace epk::py
