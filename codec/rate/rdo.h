// Optional per-row rate-distortion optimisation (the paper's section 3.5, the reference's rdo.py): every row chooses
// among K quantisations at scales rho_k * s (rho in [0.70, 1.45], nested ladder starting at 1), under a Lagrangian
// that keeps the modelled total at the baseline's bytes; probabilities come from the current selection with +1/2 per
// symbol, and are re-estimated each sweep.
#pragma once

#include <cstdint>
#include <vector>

#include "codec/lattice/quantize.h"

namespace epk::rate {

// The ratio ladder: 1.0, then the geometric midpoint of the widest log-gap inside [0.70, 1.45], count in all, sorted.
std::vector<double> ratio_ladder(int count, double low = 0.70, double high = 1.45);

struct RdoProblem {
  const float* x = nullptr;          // rows * padded_cols weights
  const float* normalized = nullptr;  // the same divided by the row RMS
  const float* rms = nullptr;         // rows
  std::uint32_t rows = 0;
  std::uint32_t padded_cols = 0;
  double scale = 1.0;
  int prob_bits = 11;
  std::uint32_t tile_symbols = 16384;
  int sweeps = 1;
  int candidates = 5;
  double ratio_low = 0.70;   // the ladder's range (the reference's)
  double ratio_high = 1.45;
  int threads = 1;
};

// fields/scales/row_sse hold the baseline (quantised at scale and refit) on entry and the chosen rows on return.
// row_ratio (optional) receives each row's chosen ratio rho (its lattice scale is rho * scale).
void optimize_rows(const RdoProblem& p, lattice::QuantizedFields& fields, std::vector<float>& scales,
                   std::vector<double>& row_sse, std::vector<double>* row_ratio = nullptr);

}  // namespace epk::rate
