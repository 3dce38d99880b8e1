// The payload of an encoded message: its bytes after the frame header, as the decoders take them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "shm/protocol.h"

namespace epk::test {

inline std::span<const std::uint8_t> payload_of(const std::vector<std::uint8_t>& msg) {
  return std::span<const std::uint8_t>(msg).subspan(shm::kHeaderSize);
}

}  // namespace epk::test
