// The inner loops of the calibrated encode (codec/rate/feedback.cc, codec/rate/calibration.cc), vectorised, each
// beside its plain reference; both do the same float operations in the same order (codec/rate/simd.h), so they
// agree bit for bit (tests/codec/rate/cholesky_test.cc).
#pragma once

#include <cstddef>

namespace epk::rate {

// For each of `rows` rows r: w[r][j] -= ((0 + e[8r] f[j]) + e[8r + 1] f[stride + j]) + ... + e[8r + 7] f[7 * stride +
// j] for j in [j0, j1): one block's error feedback onto the rows' later columns (f: the block's 8 update rows, e: each
// row's 8 errors). The fast form reads each chunk of f once for four rows; every row's sum keeps the plain order.
void feedback_update_rows(float* const* w, const float* f, std::size_t stride, const float* e, std::size_t rows,
                          std::size_t j0, std::size_t j1);
void feedback_update_rows_reference(float* const* w, const float* f, std::size_t stride, const float* e,
                                    std::size_t rows, std::size_t j0, std::size_t j1);

// g[j] += a[0] h[0][j], then += a[1] h[1][j], ... up to m = count - 1, for j < len: the multiply-adds of one output
// row against rows of H, in the order given.
void axpy_rows(const float* a, const float* const* h, std::size_t count, float* g, std::size_t len);
void axpy_rows_reference(const float* a, const float* const* h, std::size_t count, float* g,
                         std::size_t len);

}  // namespace epk::rate
