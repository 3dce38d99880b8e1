// Calibration statistics for Hessian-aware encoding (docs/FORMAT.md 12): for each weight NAME of a checkpoint, its
// input second-moment matrix H = sum over tokens of x x^T (F32, [cols, cols], cols the weight's input dimension) as
// `NAME.hessian`, and the token count as `NAME.tokens`. The file is mapped, not copied: the views stay valid while
// the CalibrationSet lives.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>

#include "codec/common/result.h"
#include "codec/safetensors/reader.h"

namespace epk::rate {

inline constexpr std::string_view kHessianSuffix = ".hessian";
inline constexpr std::string_view kTokensSuffix = ".tokens";
// |H_ij - H_ji| <= kSymmetryTolerance * sqrt(H_ii * H_jj): a second-moment matrix summed in fp32 on a GPU is
// symmetric only up to rounding; Cauchy-Schwarz bounds |H_ij| by sqrt(H_ii H_jj), the natural scale of the entry.
inline constexpr double kSymmetryTolerance = 1e-3;

// One weight's statistics: h is row-major cols x cols (a view into the mapped file).
struct HessianView {
  std::span<const float> h;
  std::uint32_t cols = 0;
  double tokens = 0.0;
};

class CalibrationSet {
 public:
  // Opens and validates every statistic. Errors (kBadInput) name the tensor: a .hessian that is not F32 or not
  // square 2-D, a non-finite entry (row and column), a negative diagonal, an asymmetric pair (row and column), a
  // .hessian without its .tokens or a .tokens without its .hessian, a token count that is not a scalar or
  // 1-element integer/float tensor or not finite and positive, and a tensor named neither way.
  static Result<CalibrationSet> open(const std::string& path);
  static Result<CalibrationSet> parse(safetensors::File file);

  // Checks the statistics against the checkpoint's weights: each NAME must be a 2-D weight with NAME's cols input
  // columns. Errors (kInvalidArgument) name the tensor.
  Status check_against(std::span<const safetensors::TensorView> weights) const;

  // nullptr when the weight has no statistics.
  const HessianView* find(std::string_view weight) const;
  std::size_t size() const { return layers_.size(); }
  const std::string& path() const { return file_.path(); }

 private:
  safetensors::File file_;
  std::map<std::string, HessianView, std::less<>> layers_;
};

// g_r = H v_r for rows r0..r1 of v (row stride `stride` floats; the first h.cols entries of a row are used), into
// g ((r1 - r0) x h.cols). Each row's arithmetic is the same whatever rows it is computed with. H must be finite (as
// CalibrationSet::open ensures): the fast form then equals the reference bit for bit.
void h_times_rows(const float* v, std::size_t r0, std::size_t r1, std::size_t stride, const HessianView& h, float* g);
// The plain form h_times_rows equals bit for bit: an axpy of each H row in turn per row, zeros of v skipped.
void h_times_rows_reference(const float* v, std::size_t r0, std::size_t r1, std::size_t stride, const HessianView& h,
                            float* g);

// sum_r v_r H v_r^T over rows of v (rows x cols, row stride `stride` floats), accumulated in float64 per row.
// Deterministic for any thread count.
double h_weighted_energy(const float* v, std::size_t rows, std::size_t stride, const HessianView& h, int threads);

// The H-weighted relative L2 error sqrt(tr((W - Q) H (W - Q)^T) / tr(W H W^T)) for W = source, Q = decoded (rows x
// cols each): the layer's output error over the calibration inputs relative to its output, the same kind of figure
// as the plain relative L2 error (which is this with H = I). 0 when both traces are 0, infinity when only the
// source's is.
double h_weighted_relative_error(std::span<const float> source, std::span<const float> decoded, std::size_t rows,
                                 const HessianView& h, int threads);

}  // namespace epk::rate
