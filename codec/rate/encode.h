// The EntroPack encoder for one 2-D weight: row normalisation, target-rate scale search, probability-precision
// escalation and scale coarsening, row refit, optional row RDO, tiled rANS coding. Follows the reference's eager
// encoder step for step, plus (calibrate_rate, on by default) a correction of its size model that brings the stored
// rate to within a fraction of a percent of the target. The stored buffers decode bit-exactly in the reference
// package. Reentrant: tensors may be encoded concurrently from several threads.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "codec/common/dtype.h"
#include "codec/common/result.h"
#include "codec/rans/encoded_tensor.h"
#include "codec/rans/profile.h"
#include "codec/rate/calibration.h"

namespace epk::rate {

// Bytes a coded tensor is stored in (everything the target rate counts). An empty function: the reference's blob
// (rans::reference_quant_state_bytes), as the reference's actual_bpp counts; an .epk packer counts its container
// form (buffers plus index entry, docs/FORMAT.md 10.5), as rate::pack_tensor does. It must be callable from any
// thread and depend on the tensor's geometry and buffer sizes only (the calibration calls it on a sample).
using StoredBytes = std::function<std::uint64_t(const rans::EncodedTensor&)>;

struct EncodeOptions {
  double target_bpp = 4.0;          // bits per weight, in [0.001, 11]; capped at the source dtype's width
  int rdo_sweeps = 0;               // 0: no row RDO; 1..8 sweeps
  int rdo_candidates = 5;           // scales per row tried by RDO
  double rdo_ratio_low = 0.70;      // their range, as multiples of the common scale (the reference's [0.70, 1.45])
  double rdo_ratio_high = 1.45;
  int threads = 1;                  // worker threads within this tensor
  int prob_bits = 0;                // 0: 11 up to 7 bpp else 12, raised to 15 while an alphabet overflows
  std::uint32_t tile_symbols = 0;   // 0: by target and profile (rate::tile_symbols_for, codec/rate/tile_length.h)
  int search_iterations = 12;       // bisection steps
  std::uint64_t search_max_vectors = 262144;  // sample budget of the search, in 8-weight vectors
  bool calibrate_rate = true;       // correct the size model by the coder's measured overhead (search.h); false
                                    // keeps the reference's search exactly
  StoredBytes stored_bytes;         // with calibrate_rate: what the target counts (empty: the reference's blob)
  // How the tensor will be stored: the calibration prices its coded bytes and row scales in that form (search.h).
  // For the native profile the encoder also rounds its final row scales onto that profile's grid
  // (rans::round_scales_to_native) before coding them, so that any error measured of its output (a device encoder
  // measures its own) is the stored tensor's; scales that cannot be rounded (a span beyond fp16's under one shift)
  // are left as they are and EncodeReport::profile_note says why (the tensor then keeps the reference profile).
  rans::StreamProfile profile = rans::StreamProfile::kReference;
  // Beyond the reference (docs/measurements/cpu-codec-error.md): entropy-constrained choice of each vector's lattice
  // point under the tensor's own tables (codec/rate/ecvq.h), iterated with the table fit, the scale then re-searched
  // on the whole tensor so the stored rate still meets the target.
  bool ecvq = false;
  int ecvq_iterations = 2;
  double ecvq_lambda = 1.0;         // multiple of the high-rate slope (ecvq.h)
  bool prune_tables = false;        // with ecvq: drop table edge values that cost more than they save
  bool fine_rate = false;           // whole-tensor rate correction to 0.03% instead of 0.2% (up to 8 re-quantisations)
  // The layer's input statistics (codec/rate/calibration.h), or nullptr: then the encoder is exactly the one without
  // them. With them, every quantisation (the search's sample, the whole tensor) rounds with error feedback
  // (codec/rate/feedback.h) and the row scales are refitted against the H-weighted objective; the stream format
  // is unchanged. Not with ecvq or rdo_sweeps (their point and scale choices are Euclidean). Must outlive the call.
  const HessianView* calibration = nullptr;
};

// What the encoder decided, for reports and tests.
struct EncodeReport {
  double scale = 0.0;             // final lattice scale
  int prob_bits = 0;
  bool coarsened = false;         // the scale was coarsened because an alphabet overflowed 2^15
  double estimated_bytes = 0.0;   // the size model on the full tensor's fields
  double max_abs_input = 0.0;
  double ecvq_lambda = 0.0;             // with ecvq: lambda in lattice units per bit
  std::uint64_t ecvq_changed = 0;       // vectors not at their nearest point
  std::uint64_t pruned_entries = 0;     // table entries pruned
  std::string profile_note;             // non-empty: the native profile was asked for and could not take the scales
};

// Input dtypes: F32, BF16, F16, F8_E4M3, F8_E5M2, I8 (weights is rows * cols elements, row-major, little-endian).
bool encode_input_supported(DType t);

// Errors (kInvalidArgument) name the tensor: empty shape, unsupported dtype, a byte count that does not match,
// non-finite values (with the element's row and column), bad options.
Result<rans::EncodedTensor> encode(std::span<const std::byte> weights, std::uint32_t rows, std::uint32_t cols,
                                   DType dtype, const EncodeOptions& options, std::string_view name = "tensor",
                                   EncodeReport* report = nullptr);

}  // namespace epk::rate
