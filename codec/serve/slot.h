// What a served tensor's slot is: its byte size, element type, shape and strides. The serving layer (codec/serve/
// producer.h) answers with one for every (tensor, layout, shard); epkd answers an acquire with it and sizes the slot
// by it. Fixed-size, no heap: the cache-hit acquire path builds one per request and must not allocate, so that a
// hit's latency never includes the allocator's. Dims reads like the std::vector it stands for (size, [], begin/end,
// == with a vector), so producers can write `out.shape = e.shape`.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "codec/common/dtype.h"

namespace epk::serve {

// The most dimensions a served tensor has (the wire's shape field holds this many: shm/protocol.h asserts it).
inline constexpr std::size_t kMaxDims = 8;

template <class T>
class Dims {
 public:
  static constexpr std::size_t kCapacity = kMaxDims;

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

struct Slot {
  std::uint64_t bytes = 0;
  DType dtype = DType::kF32;
  Shape shape;
  Strides strides;  // elements, row-major unless the layout says otherwise (packed layouts: all 0, shm/layout.h)
};

// Row-major strides, in elements, for `shape` (at most kMaxDims entries are used).
Strides row_major_strides(std::span<const std::uint64_t> shape);

}  // namespace epk::serve
