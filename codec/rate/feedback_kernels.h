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

// For r < rows and j < len: g[r * g_stride + j] += v[r * v_stride + m] * h[m * h_stride + j] for m = 0, 1, ..,
// count - 1 in turn (a multiply, then an add, per term): a block of the product V H accumulated into g. The fast
// form keeps a 4-row, 16-column block of g in registers across the m loop.
void rows_times_matrix(const float* v, std::size_t v_stride, std::size_t rows, const float* h, std::size_t h_stride,
                       std::size_t count, float* g, std::size_t g_stride, std::size_t len);
void rows_times_matrix_reference(const float* v, std::size_t v_stride, std::size_t rows, const float* h,
                                 std::size_t h_stride, std::size_t count, float* g, std::size_t g_stride,
                                 std::size_t len);

}  // namespace epk::rate
