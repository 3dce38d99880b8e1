// Row-scale refit: the reconstruction scale of each row fitted by least squares to the points the quantiser chose,
// which lowers distortion at no rate cost.
#pragma once

#include <cstdint>
#include <vector>

#include "codec/lattice/quantize.h"

namespace epk::rate {

// x: rows * padded_cols weights (zero-padded), q: their fields, rms: the row RMS used to normalise, scale: the
// lattice scale. scales[r] = max(<x, p> / <p, p>, 1e-12), or float(scale) * rms[r] when every point of the row is 0.
// row_sse (optional) receives each row's squared error after the fit.
void refit_rows(const float* x, std::uint32_t rows, std::uint32_t padded_cols, const lattice::QuantizedFields& q,
                double scale, const float* rms, std::vector<float>& scales, std::vector<double>* row_sse,
                int threads);

}  // namespace epk::rate
