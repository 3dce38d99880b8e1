#include "codec/rate/refit.h"

#include <algorithm>

#include "codec/common/parallel.h"

namespace epk::rate {

namespace {
constexpr double kMinScale = 1e-12;
}

void refit_rows(const float* x, std::uint32_t rows, std::uint32_t padded_cols, const lattice::QuantizedFields& q,
                double scale, const float* rms, std::vector<float>& scales, std::vector<double>* row_sse,
                int threads) {
  scales.resize(rows);
  if (row_sse) row_sse->resize(rows);
  const std::size_t vpr = padded_cols / 8;
  parallel_for_blocks(rows, 64, threads, [&](std::size_t r0, std::size_t r1) {
    for (std::size_t r = r0; r < r1; ++r) {
      double num = 0.0;
      double den = 0.0;
      double energy = 0.0;
      for (std::size_t v = r * vpr; v < (r + 1) * vpr; ++v) {
        const lattice::E8Point p = lattice::fields_to_point(q.coset[v], &q.fields[v * lattice::kFields]);
        for (int i = 0; i < 8; ++i) {
          const double level = double(lattice::coordinate(p.z[i], p.c));
          const double xv = x[v * 8 + std::size_t(i)];
          num += xv * level;
          den += level * level;
          energy += xv * xv;
        }
      }
      if (den > 0.0) {
        scales[r] = float(std::max(num / den, kMinScale));
        if (row_sse) (*row_sse)[r] = std::max(0.0, energy - num * num / den);
      } else {
        scales[r] = float(scale) * rms[r];
        if (row_sse) (*row_sse)[r] = energy;
      }
    }
  });
}

}  // namespace epk::rate
