// Shape and strides of a served tensor without the heap: at most shm::kMaxDims entries in a fixed array. The
// cache-hit acquire path builds one of these per request and must not allocate, so that a hit's latency never
// includes the allocator's. It reads like the std::vector it replaces (size, [], begin/end, == with a vector), so
// sources can still write `out.shape = e.shape`.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "shm/protocol.h"

namespace epk::daemon {

template <class T>
class Dims {
 public:
  static constexpr std::size_t kCapacity = shm::kMaxDims;

  Dims() = default;
  // Entries past kCapacity are dropped; sources refuse such ranks before they get here (fits() says whether they do).
  Dims(std::span<const T> v) { assign(v); }                  // NOLINT(google-explicit-constructor)
  Dims(const std::vector<T>& v) { assign(std::span<const T>(v)); }  // NOLINT(google-explicit-constructor)
  Dims(std::initializer_list<T> v) { assign(std::span<const T>(v.begin(), v.size())); }
  Dims& operator=(const std::vector<T>& v) {
    assign(std::span<const T>(v));
    return *this;
  }

  static constexpr bool fits(std::size_t n) { return n <= kCapacity; }

  void assign(std::span<const T> v) {
    n_ = static_cast<std::uint32_t>(std::min(v.size(), kCapacity));
    std::copy_n(v.begin(), n_, v_.begin());
  }
  void resize(std::size_t n) { n_ = static_cast<std::uint32_t>(std::min(n, kCapacity)); }

  std::size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  T& operator[](std::size_t i) { return v_[i]; }
  const T& operator[](std::size_t i) const { return v_[i]; }
  T* begin() { return v_.data(); }
  T* end() { return v_.data() + n_; }
  const T* begin() const { return v_.data(); }
  const T* end() const { return v_.data() + n_; }
  const T* data() const { return v_.data(); }
  std::span<const T> span() const { return {v_.data(), n_}; }
  std::vector<T> to_vector() const { return {begin(), end()}; }

  friend bool operator==(const Dims& a, const Dims& b) { return std::ranges::equal(a.span(), b.span()); }
  friend bool operator==(const Dims& a, const std::vector<T>& b) { return std::ranges::equal(a.span(), b); }

 private:
  std::array<T, kCapacity> v_{};
  std::uint32_t n_ = 0;
};

using Shape = Dims<std::uint64_t>;
using Strides = Dims<std::int64_t>;

}  // namespace epk::daemon
