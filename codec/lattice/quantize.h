// Quantizing whole rows: normalised weights divided by the lattice scale, mapped to E8 points, kept as fields.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "codec/lattice/e8.h"

namespace epk::lattice {

// The fields of every vector of a tensor, in row-major vector order.
struct QuantizedFields {
  std::vector<std::uint8_t> coset;   // one per vector
  std::vector<std::int32_t> fields;  // kFields per vector: z1..z7, m

  std::size_t vectors() const { return coset.size(); }
  void resize(std::size_t n) {
    coset.resize(n);
    fields.resize(n * kFields);
  }
};

// Quantizes n vectors of x (8 floats each): y = x / scale in float32 (a division, as the reference), nearest E8
// point, fields. coset and fields receive n and 8n entries.
// SSE2 fast path; identical results to quantize_vectors_ref (the plain loop over nearest_e8) for every input.
void quantize_vectors(const float* x, std::size_t n, float scale, std::uint8_t* coset, std::int32_t* fields);
void quantize_vectors_ref(const float* x, std::size_t n, float scale, std::uint8_t* coset, std::int32_t* fields);

}  // namespace epk::lattice
