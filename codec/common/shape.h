// A tensor shape's element count and its printed form, as every error message and table names a shape.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace epk {

// The product of the dimensions (1 for a scalar). The caller has bounded the shape (container and safetensors
// readers check that the product fits 64 bits).
inline std::uint64_t element_count(const std::vector<std::uint64_t>& shape) {
  std::uint64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

// "[4096, 14336]"; "[]" for a scalar.
inline std::string shape_string(const std::vector<std::uint64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace epk
