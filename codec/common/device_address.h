// A device virtual address (a CUdeviceptr: the integer value of a pointer into device memory) as it crosses a module
// edge outside codec/cuda: the serving layer's device half (codec/serve), device pools and copies (shm), epkd's lanes,
// libepk's device side. A bare u64 there reads like a size or an offset; this type does not mix with either by
// accident. One u64, trivially copyable, no CUDA header: zero cost, and host-only code may pass it around.
//
//   DeviceAddress base = pool.device_ptr();           // from a pool, an allocation, or explicitly:
//   DeviceAddress at{raw};  DeviceAddress::of(ptr);   // never implicitly from an integer or a pointer
//   DeviceAddress slot = base + offset;               // an address plus a byte offset is an address
//   cudaMemsetAsync(slot.as<void>(), 0, n, stream);   // the pointer, where a CUDA call or a kernel wants one
//   std::uint64_t raw = slot.value;                   // the integer, where a wire field or the C ABI wants one
#pragma once

#include <cstdint>
#include <type_traits>

namespace epk {

struct DeviceAddress {
  std::uint64_t value = 0;  // 0: no address

  constexpr DeviceAddress() = default;
  constexpr explicit DeviceAddress(std::uint64_t v) : value(v) {}
  // The address of a device pointer (e.g. a cudaMalloc'd one, or one a caller hands in as void*).
  static DeviceAddress of(const volatile void* p) {
    return DeviceAddress(static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p)));
  }

  // The address as a T* (T may be const), for a CUDA call or a kernel argument; no memory is touched.
  template <class T = void>
  T* as() const {
    return reinterpret_cast<T*>(static_cast<std::uintptr_t>(value));
  }

  constexpr explicit operator bool() const { return value != 0; }
  constexpr bool aligned(std::uint64_t alignment) const { return value % alignment == 0; }
  constexpr bool operator==(const DeviceAddress&) const = default;

  // `bytes` past this address.
  constexpr DeviceAddress operator+(std::uint64_t bytes) const { return DeviceAddress(value + bytes); }
};
static_assert(sizeof(DeviceAddress) == sizeof(std::uint64_t) && std::is_trivially_copyable_v<DeviceAddress>);
static_assert(!std::is_convertible_v<std::uint64_t, DeviceAddress> && !std::is_convertible_v<void*, DeviceAddress> &&
              !std::is_constructible_v<std::uint64_t, DeviceAddress>);

}  // namespace epk
