// XXH3-64, the checksum of every .epk buffer and of the tensor index.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace epk {

std::uint64_t xxh3_64(std::span<const std::uint8_t> bytes);

// Streaming form for data that is written piece by piece.
class Xxh3Stream {
 public:
  Xxh3Stream();
  ~Xxh3Stream();
  Xxh3Stream(const Xxh3Stream&) = delete;
  Xxh3Stream& operator=(const Xxh3Stream&) = delete;
  void update(std::span<const std::uint8_t> bytes);
  std::uint64_t digest() const;

 private:
  void* state_;
};

}  // namespace epk
