// SHA-256 (FIPS 180-4) for the tests: expected.json carries the sha256 that Python's hashlib computed of each tensor's
// bytes (the reference venv has no xxhash module). Test-only; not for production paths.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace epk::testing {

// Lower-case hex digest, as hashlib's hexdigest().
std::string sha256_hex(std::span<const std::uint8_t> bytes);

}  // namespace epk::testing
