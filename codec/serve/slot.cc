#include "codec/serve/slot.h"

namespace epk::serve {

Strides row_major_strides(std::span<const std::uint64_t> shape) {
  Strides s;
  s.resize(shape.size());
  shape = shape.first(s.size());
  std::int64_t acc = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= static_cast<std::int64_t>(shape[i]);
  }
  return s;
}

}  // namespace epk::serve
