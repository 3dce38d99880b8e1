// The bytes of a vector of trivially copyable values, in the form the container Writer takes them.
#pragma once

#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

namespace epk::test {

template <class T>
std::span<const std::uint8_t> bytes_of(const std::vector<T>& v) {
  static_assert(std::is_trivially_copyable_v<T>);
  return {reinterpret_cast<const std::uint8_t*>(v.data()), v.size() * sizeof(T)};
}

}  // namespace epk::test
