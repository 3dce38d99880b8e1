// Bit-level writing and reading of the native profile's metadata buffers (docs/STREAM.md section 9): fields are
// written least significant bit first into bytes filled from their low bit, and an Elias gamma code of n >= 1 is
// floor(log2 n) zero bits, then n's floor(log2 n) + 1 bits from the most significant. The reader never reads past
// its bytes: every read says whether it fit, so a truncated or corrupt buffer is an error, not a crash.
#pragma once

#include <bit>
#include <cstdint>
#include <span>
#include <vector>

namespace epk::rans {

class BitWriter {
 public:
  // The low n bits of v (n <= 32).
  void bits(std::uint32_t v, int n) {
    for (int i = 0; i < n; ++i) bit((v >> i) & 1u);
  }
  // n >= 1.
  void gamma(std::uint64_t n) {
    const int k = std::bit_width(n) - 1;
    for (int i = 0; i < k; ++i) bit(0);
    for (int i = k; i >= 0; --i) bit(std::uint32_t(n >> i) & 1u);
  }
  std::uint64_t bit_count() const { return count_; }
  // The bytes written; the last one's unused high bits are zero.
  std::vector<std::uint8_t> take() { return std::move(bytes_); }

 private:
  void bit(std::uint32_t b) {
    if (count_ % 8 == 0) bytes_.push_back(0);
    bytes_.back() = std::uint8_t(bytes_.back() | (b << (count_ % 8)));
    ++count_;
  }
  std::vector<std::uint8_t> bytes_;
  std::uint64_t count_ = 0;
};

// BitWriter's interface, counting the bits instead of writing them: what a writer would take.
class BitCounter {
 public:
  void bits(std::uint32_t, int n) { count_ += std::uint64_t(n); }
  void gamma(std::uint64_t n) { count_ += 2 * std::uint64_t(std::bit_width(n) - 1) + 1; }
  std::uint64_t bit_count() const { return count_; }
  std::uint64_t byte_count() const { return (count_ + 7) / 8; }

 private:
  std::uint64_t count_ = 0;
};

class BitReader {
 public:
  explicit BitReader(std::span<const std::uint8_t> bytes) : bytes_(bytes) {}
  // n <= 32 bits into v; false if fewer than n bits are left.
  bool bits(int n, std::uint32_t& v) {
    if (remaining() < std::uint64_t(n)) return false;
    v = 0;
    for (int i = 0; i < n; ++i) v |= bit() << i;
    return true;
  }
  // A gamma code of at most max_bits significant bits (<= 63); false if it is longer or truncated.
  bool gamma(int max_bits, std::uint64_t& n) {
    int k = 0;
    while (true) {
      if (remaining() == 0) return false;
      if (bit() != 0) break;
      if (++k >= max_bits) return false;
    }
    if (remaining() < std::uint64_t(k)) return false;
    n = 1;
    for (int i = 0; i < k; ++i) n = n << 1 | bit();
    return true;
  }
  std::uint64_t remaining() const { return std::uint64_t(bytes_.size()) * 8 - pos_; }
  // Whether every bit left (the last byte's padding) is zero and less than a byte is left.
  bool only_zero_padding() const {
    if (remaining() >= 8) return false;
    return pos_ % 8 == 0 || (bytes_.back() >> (pos_ % 8)) == 0;
  }

 private:
  std::uint32_t bit() {
    const std::uint32_t b = (bytes_[pos_ / 8] >> (pos_ % 8)) & 1u;
    ++pos_;
    return b;
  }
  std::span<const std::uint8_t> bytes_;
  std::uint64_t pos_ = 0;
};

}  // namespace epk::rans
