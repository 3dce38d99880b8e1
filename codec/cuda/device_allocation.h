// Owned device memory and the stream-ordered copies the serving layer's device half issues (codec/serve/
// device_tier.h): plan scratch, intq tensors' device forms, column-shard work. Host-only header without CUDA headers
// (the runtime API is behind it, in device_allocation.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "codec/common/device_address.h"
#include "codec/common/result.h"
#include "codec/cuda/decode/decode.h"

namespace epk::cuda {

// cudaMalloc'd bytes on one device, freed (with that device current) when the object goes. Empty: a null address().
class DeviceAllocation {
 public:
  DeviceAllocation() = default;
  DeviceAllocation(DeviceAllocation&& o) noexcept { *this = static_cast<DeviceAllocation&&>(o); }
  DeviceAllocation& operator=(DeviceAllocation&& o) noexcept;
  DeviceAllocation(const DeviceAllocation&) = delete;
  DeviceAllocation& operator=(const DeviceAllocation&) = delete;
  ~DeviceAllocation() { reset(); }

  // `bytes` on `device` (0: an empty allocation, no call). kCuda naming `what` when the device has no room.
  static Result<DeviceAllocation> create(std::uint64_t bytes, int device, std::string_view what);
  DeviceAddress address() const { return address_; }
  std::uint64_t size() const { return size_; }
  void reset();

 private:
  DeviceAddress address_;
  std::uint64_t size_ = 0;
  int device_ = -1;
};

// Page-locked host memory (cudaMallocHost: portable under unified addressing), freed when the object goes: the
// source of copies that run at the copy engine's speed. Empty: a null data().
class PinnedAllocation {
 public:
  PinnedAllocation() = default;
  PinnedAllocation(PinnedAllocation&& o) noexcept { *this = static_cast<PinnedAllocation&&>(o); }
  PinnedAllocation& operator=(PinnedAllocation&& o) noexcept;
  PinnedAllocation(const PinnedAllocation&) = delete;
  PinnedAllocation& operator=(const PinnedAllocation&) = delete;
  ~PinnedAllocation() { reset(); }

  // `bytes` of it (0: an empty allocation, no call). kCuda naming `what` when the host cannot pin them.
  static Result<PinnedAllocation> create(std::uint64_t bytes, std::string_view what);
  std::byte* data() const { return data_; }
  std::uint64_t size() const { return size_; }
  void reset();

 private:
  std::byte* data_ = nullptr;
  std::uint64_t size_ = 0;
};

// Makes `device` current on this thread (cudaSetDevice: its primary context, the one epkd's driver-API code uses).
Status set_device(int device);
// Stream-ordered: `bytes` zeros at dst; `bytes` from host memory src to dst (src must stay valid until the stream
// passes the copy). Errors name `what`.
Status zero_async(DeviceAddress dst, std::uint64_t bytes, Stream stream, std::string_view what);
Status copy_to_device_async(DeviceAddress dst, const void* src, std::uint64_t bytes, Stream stream,
                            std::string_view what);
Status synchronize(Stream stream, std::string_view what);

}  // namespace epk::cuda
