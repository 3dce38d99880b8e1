#include "codec/lattice/quantize.h"

namespace epk::lattice {

void quantize_vectors(const float* x, std::size_t n, float scale, std::uint8_t* coset, std::int32_t* fields) {
  for (std::size_t v = 0; v < n; ++v) {
    float y[kDim];
    for (int i = 0; i < kDim; ++i) y[i] = x[v * kDim + i] / scale;
    const E8Point p = nearest_e8(y);
    coset[v] = p.c;
    point_to_fields(p, fields + v * kFields);
  }
}

}  // namespace epk::lattice
