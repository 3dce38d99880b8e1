// Fixed-endian, unaligned-safe reads and writes of integers and floats. Every field of a file or message is read
// through these, never by casting a pointer into mapped memory.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

namespace epk {

static_assert(std::endian::native == std::endian::little, "epk assumes a little-endian host");

template <class T>
  requires std::is_trivially_copyable_v<T>
inline T load_le(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <class T>
  requires std::is_trivially_copyable_v<T>
inline void store_le(void* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

template <class T>
  requires std::is_trivially_copyable_v<T>
inline void append_le(std::string& out, T v) {
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));
  out.append(buf, sizeof(T));
}

// a + b and a * b for sizes taken from untrusted input: false on overflow.
inline bool checked_add(std::uint64_t a, std::uint64_t b, std::uint64_t* out) { return !__builtin_add_overflow(a, b, out); }
inline bool checked_mul(std::uint64_t a, std::uint64_t b, std::uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }

inline constexpr std::uint64_t align_up(std::uint64_t v, std::uint64_t alignment) {
  return (v + alignment - 1) / alignment * alignment;
}

}  // namespace epk
