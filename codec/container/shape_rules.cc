#include "codec/container/shape_rules.h"

#include "codec/common/bytes.h"

namespace epk::container {

std::optional<ShapeFault> check_shape(Encoding encoding, DType dtype, std::span<const std::uint64_t> shape) {
  if (shape.size() > kMaxRank)
    return ShapeFault{"rank", std::to_string(shape.size()) + " exceeds " + std::to_string(kMaxRank)};
  std::uint64_t count = 1;
  for (auto d : shape)
    if (!checked_mul(count, d, &count)) return ShapeFault{"shape", "element count overflows 64 bits"};
  std::uint64_t bits;
  if (!checked_mul(count, static_cast<std::uint64_t>(dtype_bits(dtype)), &bits))
    return ShapeFault{"shape", "element count * dtype bits overflows 64 bits"};
  if (!checked_mul(count, std::uint64_t(32), &bits))
    return ShapeFault{"shape", "element count * 32 overflows 64 bits (the widest decoded element, FORMAT.md 5.3)"};
  if (encoding == Encoding::kLatticeRans) {
    if (shape.size() != 2)
      return ShapeFault{"rank", std::to_string(shape.size()) + ", but a lattice-rans tensor has rank 2 (FORMAT.md 10.1)"};
    for (std::size_t d = 0; d < 2; ++d) {
      if (shape[d] == 0 || shape[d] >= (std::uint64_t(1) << 32))
        return ShapeFault{"shape[" + std::to_string(d) + "]",
                          std::to_string(shape[d]) + " outside [1, 2^32) (a lattice-rans dimension, FORMAT.md 10.1)"};
    }
  }
  return std::nullopt;
}

}  // namespace epk::container
