// E8 nearest point and the invertible field representation (c, z1..z7, m) of a lattice point, with the tie rules of the
// reference package (docs/STREAM.md section 2): the decoder reproduces exactly the point the
// encoder chose only if both sides agree on every tie.
#pragma once

#include <cstdint>

namespace epk::lattice {

inline constexpr int kDim = 8;     // E8 vectors are 8 consecutive weights of a row
inline constexpr int kFields = 8;  // z1..z7 and m; the coset c is kept apart

// A point of E8 = D8 u (D8 + 1/2) as its coset c (0 or 1) and its integer part z in D8: p = z + c/2.
struct E8Point {
  std::int32_t z[kDim];
  std::uint8_t c;
};

// Nearest point of D8 to y: round half to even, then, if the coordinate sum is odd, move the coordinate with the
// largest |residual| (lowest index on ties) one step towards y (a zero residual counts as positive).
// |y_i| must stay below 2^30 (normalised rows divided by a scale >= 1e-3 are far below it).
void nearest_d8(const float y[kDim], std::int32_t out[kDim]);

// Nearest E8 point to y. The two coset candidates are compared in float64 with the reference's summation order;
// an exact tie picks the integer coset.
E8Point nearest_e8(const float y[kDim]);

// Fields of a point: f[0..6] = z1..z7, f[7] = m = floor((z8 - par) / 2) with par = (z1 + .. + z7) mod 2.
void point_to_fields(const E8Point& p, std::int32_t fields[kFields]);
// Inverse: z8 = 2m + par. Exact for every field tuple.
E8Point fields_to_point(std::uint8_t c, const std::int32_t fields[kFields]);

// Coordinates of the point as the reference computes them in float32: float(z_i) + 0.5f * c.
inline float coordinate(std::int32_t z, std::uint8_t c) { return float(z) + 0.5f * float(c); }

}  // namespace epk::lattice
