// libepk's device side (internal): device pools imported from the hello reply (shm::import_device_pool), the
// daemon's decode-done events opened once each (cuIpcOpenEventHandle), this client's own release event, and the
// copies `epk get` needs. Built with the CUDA toolkit (client/device_client.cc, driver API through the dlopen'ed
// loader); elsewhere client/device_client_none.cc answers kUnsupported, so host pools work the same in both.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "codec/common/device_address.h"
#include "codec/common/result.h"
#include "shm/protocol.h"
#include "shm/unique_fd.h"

namespace epk::client {

class DeviceSide {
 public:
  virtual ~DeviceSide() = default;
  // `events`: the hello reply's ring (may be empty when the daemon serves no device pool).
  static Result<std::unique_ptr<DeviceSide>> create(std::vector<shm::IpcEventHandle> events);

  // Imports pool `pool_id` (the fd is consumed) and opens its ring, events [first_event, first_event + event_count)
  // of the hello's list, on `device`; returns its base address.
  virtual Result<DeviceAddress> import_pool(std::uint32_t pool_id, shm::UniqueFd fd, std::uint64_t size, int device,
                                            std::uint32_t first_event, std::uint32_t event_count) = 0;
  // The daemon's event `index` of the ring, opened on first use (a CUevent as void*).
  virtual Result<void*> event(std::uint32_t index, int device) = 0;
  // Makes `stream` wait on `event` (stream-ordered, the CPU does not block). A null stream is the legacy default one.
  virtual Status wait(void* event, void* stream) = 0;
  // Records this client's interprocess event on `stream` (after the caller's last kernel reading a slot) and returns
  // its handle for the release message. One event per client and device: a later recording supersedes an earlier
  // one, which is conservative for the daemon (it waits on more work, never less).
  virtual Result<shm::IpcEventHandle> record_release(void* stream, int device) = 0;
  // Whether `stream` has no work left to run on `device` (cuStreamQuery).
  virtual Result<bool> stream_idle(void* stream, int device) = 0;
  // Waits for `event` on the CPU, then copies device bytes to host memory.
  virtual Status copy_to_host(void* dst, DeviceAddress src, std::uint64_t bytes, void* event, int device) = 0;
};

}  // namespace epk::client
