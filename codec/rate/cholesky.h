// The dense factorisations behind make_feedback_factor (codec/rate/feedback.h), each in two forms: the plain one
// (the reference) and a blocked, vectorised one that does the same floating-point operations in the same order, so
// the two agree bit for bit for any thread count (tests/codec/rate/cholesky_test.cc holds them to it).
#pragma once

#include <cstddef>

namespace epk::rate {

// Lower Cholesky factor of the n x n row-major a in place (lower triangle read and overwritten, the upper one left
// alone), Cholesky-Crout with each entry L_ij = (A_ij - <L_i,<j, L_j,<j>) / L_jj, the dot product summed with four
// accumulators (k mod 4, the tail into the first, then (s0 + s1) + (s2 + s3)). Returns n, or the first column
// whose pivot A_jj - <L_j,<j, L_j,<j> is not positive (the factor is then incomplete).
std::size_t cholesky_lower_reference(double* a, std::size_t n, int threads);
// The same, left-looking in panels of kCholeskyPanel columns: a panel's dot products over the columns before it
// are one register-blocked product split over `threads` (one fork per panel), each kept as its four accumulators
// and finished column by column inside the panel.
std::size_t cholesky_lower_blocked(double* a, std::size_t n, int threads);
inline constexpr std::size_t kCholeskyPanel = 64;

// M = L^-1 for the lower triangular L (row-major, n x n, lower triangle read), written transposed: mt[j * n + i] =
// M_ij (mt holds n * n doubles; its upper part, i < j, is zeroed). Each entry by forward substitution, M_ij = (0 or
// 1 - L_ij M_jj - L_i,j+1 M_j+1,j - ... - L_i,i-1 M_i-1,j) / L_ii, subtracted in that order.
void lower_inverse_t_reference(const double* l, std::size_t n, double* mt, int threads);
// The same, columns in groups of 8 (two lanes vectors), four rows at a time; the groups split over `threads`.
void lower_inverse_t_blocked(const double* l, std::size_t n, double* mt, int threads);

}  // namespace epk::rate
