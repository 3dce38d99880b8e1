// Entropy-constrained choice of the lattice point of every vector (ECVQ; beyond the reference, which always takes the
// nearest point). Among the points of E8 near y = x / (rms * scale), each vector takes the one minimising
//   w_r * ||y - p||^2 + lambda * bits(p)
// where bits(p) is the point's code length under the tensor's own 17 tables (normalised to 2^prob_bits from the
// current selection, exactly as the stream will code it) and w_r = rms_r^2 / mean(rms^2) weighs each row by its share
// of the absolute squared error (the error the tensor's relative L2 counts). The choice and the table fit alternate.
// With the coset fixed the cost is a sum over coordinates (z8's code length depends on z8 alone: m = floor(z8 / 2)
// for every point of D8), so the minimum over each coset is found exactly as D8's nearest point is: the best value
// of each coordinate, and when the sum is odd the cheapest switch of one coordinate to its best value of the other
// parity. Table ranges never grow: a value outside a table's current range is not a candidate, so alphabets (and
// the stored frequency tables) can only shrink. Only the encoder changes: the fields are ordinary E8 points.
#pragma once

#include <cstddef>
#include <cstdint>

#include "codec/lattice/quantize.h"

namespace epk::rate {

struct EcvqOptions {
  int iterations = 2;          // choice / table-fit rounds
  double lambda_factor = 1.0;  // lambda = factor * (mean weighted ||y - p||^2) * ln2 / 4: the slope of distortion
                               // per bit per vector when the common scale moves (high-rate E8, 8 dimensions)
  int prob_bits = 11;
  // Drop a table's edge value when moving its vectors to their next choices costs less than the 16 bits its table
  // entry takes (and the empty entries behind it), at the same lambda: matters on small tensors.
  bool prune_tables = false;
  int threads = 1;
};

struct EcvqReport {
  double lambda = 0.0;
  std::uint64_t changed = 0;          // vectors whose point is not the nearest one at the end
  std::uint64_t pruned_entries = 0;   // table entries removed by pruning
};

// normalized: rows * padded_cols values (x / rms, as quantised); rms: rows. q holds the nearest points at `scale` on
// entry and the chosen points on return (the same number of vectors).
void choose_points(const float* normalized, const float* rms, std::uint32_t rows, std::uint32_t padded_cols,
                   float scale, lattice::QuantizedFields& q, const EcvqOptions& options, EcvqReport* report = nullptr);
// The same with a lattice scale per row (row RDO's choices): row r's vectors are y = normalized / row_scales[r].
void choose_points(const float* normalized, const float* rms, std::uint32_t rows, std::uint32_t padded_cols,
                   const float* row_scales, lattice::QuantizedFields& q, const EcvqOptions& options,
                   EcvqReport* report = nullptr);

}  // namespace epk::rate
