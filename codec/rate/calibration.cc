#include "codec/rate/calibration.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "codec/common/bytes.h"
#include "codec/common/parallel.h"
#include "codec/common/shape.h"
#include "codec/rate/feedback_kernels.h"

namespace epk::rate {
namespace {

// Rows of v multiplied by H a tile at a time, so that H (far larger than the caches) is read from memory once per
// tile: at 16 rows a tile that read bounds the product (16 G multiply-adds a second on one core of the build VM's
// Zen 3, against 30 at 64 and 33 at 128); 64 keeps a tensor of a few hundred rows spread over the threads.
constexpr std::size_t kTileRows = 64;
// The energy's partial sums are kept per group of this many rows, whatever the tile, so the double sum (and the
// error figures reported from it) does not depend on kTileRows.
constexpr std::size_t kSumRows = 16;

Error bad(const std::string& path, const std::string& tensor, const std::string& what) {
  return make_error(ErrorCode::kBadInput, path + ": tensor '" + tensor + "': " + what);
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The token count of a scalar or 1-element tensor of an integer or float dtype.
Result<double> token_count(const safetensors::TensorView& t, const std::string& path) {
  std::uint64_t numel = 0;
  if (!safetensors::shape_numel(t.shape, &numel) || numel != 1 || t.shape.size() > 1)
    return bad(path, t.name, "the token count must be a scalar or a 1-element tensor");
  const std::uint8_t* p = t.data.data();
  double v = std::numeric_limits<double>::quiet_NaN();
  switch (t.dtype) {
    case DType::kF32: v = load_le<float>(p); break;
    case DType::kF64: v = load_le<double>(p); break;
    case DType::kI32: v = double(load_le<std::int32_t>(p)); break;
    case DType::kI64: v = double(load_le<std::int64_t>(p)); break;
    case DType::kU32: v = double(load_le<std::uint32_t>(p)); break;
    case DType::kU64: v = double(load_le<std::uint64_t>(p)); break;
    default:
      return bad(path, t.name, "the token count must be an integer or F32/F64 value, not " +
                                   std::string(dtype_name(t.dtype)));
  }
  if (!std::isfinite(v) || v <= 0.0) return bad(path, t.name, "the token count must be finite and positive");
  return v;
}

Status check_hessian(const safetensors::TensorView& t, const std::string& path, HessianView* out) {
  if (t.dtype != DType::kF32) return bad(path, t.name, "a hessian must be F32, not " + std::string(dtype_name(t.dtype)));
  if (t.shape.size() != 2 || t.shape[0] != t.shape[1] || t.shape[0] == 0 || t.shape[0] > 0xffffffffu)
    return bad(path, t.name, "a hessian must have shape [cols, cols]");
  const std::size_t n = std::size_t(t.shape[0]);
  const float* h = reinterpret_cast<const float*>(t.data.data());
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      if (!std::isfinite(h[i * n + j]))
        return bad(path, t.name, "non-finite entry at row " + std::to_string(i) + ", column " + std::to_string(j));
    }
    if (h[i * n + i] < 0.0f) return bad(path, t.name, "negative diagonal entry at " + std::to_string(i));
  }
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = i + 1; j < n; ++j) {
      const double a = h[i * n + j], b = h[j * n + i];
      const double scale = std::sqrt(double(h[i * n + i]) * double(h[j * n + j]));
      if (std::fabs(a - b) > kSymmetryTolerance * scale && a != b)
        return bad(path, t.name, "not symmetric at row " + std::to_string(i) + ", column " + std::to_string(j));
    }
  }
  out->h = {h, n * n};
  out->cols = std::uint32_t(n);
  return {};
}

}  // namespace

Result<CalibrationSet> CalibrationSet::open(const std::string& path) {
  EPK_TRY_ASSIGN(auto file, safetensors::File::open(path));
  return parse(std::move(file));
}

Result<CalibrationSet> CalibrationSet::parse(safetensors::File file) {
  CalibrationSet set;
  const std::string path = file.path();
  std::map<std::string, double, std::less<>> tokens;
  for (const auto& t : file.tensors()) {
    if (ends_with(t.name, kHessianSuffix)) {
      HessianView v;
      EPK_TRY(check_hessian(t, path, &v));
      set.layers_[t.name.substr(0, t.name.size() - kHessianSuffix.size())] = v;
    } else if (ends_with(t.name, kTokensSuffix)) {
      EPK_TRY_ASSIGN(const double n, token_count(t, path));
      tokens[t.name.substr(0, t.name.size() - kTokensSuffix.size())] = n;
    } else {
      return bad(path, t.name, "neither NAME.hessian nor NAME.tokens");
    }
  }
  for (auto& [name, v] : set.layers_) {
    auto it = tokens.find(name);
    if (it == tokens.end()) return bad(path, name + std::string(kHessianSuffix), "missing token count " + name + ".tokens");
    v.tokens = it->second;
  }
  for (const auto& [name, n] : tokens)
    if (!set.layers_.count(name)) return bad(path, name + std::string(kTokensSuffix), "a token count without " + name + ".hessian");
  set.file_ = std::move(file);
  return set;
}

Status CalibrationSet::check_against(std::span<const safetensors::TensorView> weights) const {
  for (const auto& [layer_name, v] : layers_) {
    // A named copy: clang before 16 cannot capture a structured binding.
    const std::string& name = layer_name;
    const auto it = std::find_if(weights.begin(), weights.end(), [&](const auto& w) { return w.name == name; });
    const std::string where = path() + ": tensor '" + name + std::string(kHessianSuffix) + "': ";
    if (it == weights.end())
      return make_error(ErrorCode::kInvalidArgument, where + "the checkpoint has no weight '" + name + "'");
    if (it->shape.size() != 2 || it->shape[1] != v.cols)
      return make_error(ErrorCode::kInvalidArgument,
                        where + "shape [" + std::to_string(v.cols) + ", " + std::to_string(v.cols) +
                            "] does not match the weight's input dimension (" + shape_string(it->shape) + ")");
  }
  return {};
}

const HessianView* CalibrationSet::find(std::string_view weight) const {
  auto it = layers_.find(weight);
  return it == layers_.end() ? nullptr : &it->second;
}

void h_times_rows_reference(const float* v, std::size_t r0, std::size_t r1, std::size_t stride, const HessianView& hv,
                            float* g) {
  const std::size_t n = hv.cols;
  std::fill(g, g + (r1 - r0) * n, 0.0f);
  // g_r = H v_r = sum_i v_r[i] * H_i (H symmetric): an axpy per nonzero v_r[i], each row of H read once per call.
  for (std::size_t i = 0; i < n; ++i) {
    const float* hi = hv.h.data() + i * n;
    for (std::size_t r = r0; r < r1; ++r) {
      const float a = v[r * stride + i];
      if (a == 0.0f) continue;
      float* gr = g + (r - r0) * n;
      for (std::size_t j = 0; j < n; ++j) gr[j] += a * hi[j];
    }
  }
}

void h_times_rows(const float* v, std::size_t r0, std::size_t r1, std::size_t stride, const HessianView& hv, float* g) {
  // The reference's sums as a blocked product: for each entry of g the terms still come in H's row order. The
  // reference skips the zeros of v; here they are multiplied in, which changes no bit: H is finite (CalibrationSet
  // refuses anything else), so a skipped term is +-0, and an entry of g, which starts at +0, is never -0 (rounding
  // to nearest, with gradual underflow and no fused multiply-add, which codec/ is built without: a sum is -0 only
  // when both terms are), so adding +-0 leaves it as it was. Blocks of H (kRowChunk x kColChunk floats)
  // stay in L2 while every row of the call passes over them.
  constexpr std::size_t kColChunk = 256, kRowChunk = 256;
  const std::size_t n = hv.cols;
  std::fill(g, g + (r1 - r0) * n, 0.0f);
  for (std::size_t c0 = 0; c0 < n; c0 += kColChunk) {
    const std::size_t len = std::min(kColChunk, n - c0);
    for (std::size_t i0 = 0; i0 < n; i0 += kRowChunk) {
      rows_times_matrix(v + r0 * stride + i0, stride, r1 - r0, hv.h.data() + i0 * n + c0, n,
                        std::min(kRowChunk, n - i0), g + c0, n, len);
    }
  }
}

double h_weighted_energy(const float* v, std::size_t rows, std::size_t stride, const HessianView& hv, int threads) {
  const std::size_t n = hv.cols;
  const std::size_t tiles = (rows + kTileRows - 1) / kTileRows;
  std::vector<double> per_group((rows + kSumRows - 1) / kSumRows, 0.0);
  parallel_for_blocks(tiles, 1, threads, [&](std::size_t t0, std::size_t t1) {
    std::vector<float> g(kTileRows * n);
    for (std::size_t t = t0; t < t1; ++t) {
      const std::size_t r0 = t * kTileRows, r1 = std::min(rows, r0 + kTileRows);
      h_times_rows(v, r0, r1, stride, hv, g.data());
      for (std::size_t r = r0; r < r1; ++r) {
        double& sum = per_group[r / kSumRows];
        for (std::size_t j = 0; j < n; ++j) sum += double(v[r * stride + j]) * double(g[(r - r0) * n + j]);
      }
    }
  });
  double total = 0.0;
  for (const double s : per_group) total += s;
  return total;
}

double h_weighted_relative_error(std::span<const float> source, std::span<const float> decoded, std::size_t rows,
                                 const HessianView& h, int threads) {
  std::vector<float> diff(source.size());
  for (std::size_t i = 0; i < diff.size(); ++i) diff[i] = decoded[i] - source[i];
  const double err = h_weighted_energy(diff.data(), rows, h.cols, h, threads);
  const double energy = h_weighted_energy(source.data(), rows, h.cols, h, threads);
  if (energy > 0.0) return std::sqrt(err / energy);
  return err == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
}

}  // namespace epk::rate
