// Memory sized by a tensor's shape: a checkpoint may declare a tensor larger than this machine's memory (or than
// any allocation can be), and that must come back as an error naming the tensor and the size, never as an uncaught
// std::bad_alloc. Every tools and codec path that allocates a whole tensor goes through this.
#pragma once

#include <cstdint>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "codec/common/result.h"

namespace epk {

// Resizes v to n elements. kNoSpace "WHAT: cannot allocate N bytes (n elements of S bytes)" when the allocation fails
// or n * sizeof(T) does not fit in memory at all; v is unchanged then. `what` names the tensor (file, tensor, purpose).
template <class T>
Status resize_for_tensor(std::vector<T>& v, std::uint64_t n, std::string_view what) {
  auto fail = [&] {
    const std::string bytes = n <= UINT64_MAX / sizeof(T) ? std::to_string(n * sizeof(T)) + " bytes"
                                                          : "more than 2^64 bytes";
    return make_error(ErrorCode::kNoSpace, std::string(what) + ": cannot allocate " + bytes + " (" +
                                               std::to_string(n) + " elements of " + std::to_string(sizeof(T)) +
                                               " bytes)");
  };
  if (n > v.max_size()) return fail();
  try {
    v.resize(static_cast<std::size_t>(n));
  } catch (const std::bad_alloc&) {
    return fail();
  } catch (const std::length_error&) {
    return fail();
  }
  return {};
}

}  // namespace epk
