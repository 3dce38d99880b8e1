#include "codec/describe/check_tensor.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "codec/common/alloc.h"
#include "codec/common/shape.h"
#include "codec/decode/decode_tensor.h"
#include "codec/rans/container_io.h"
#include "codec/rans/decoder.h"
#include "codec/rate/choose.h"
#include "codec/serve/lattice_rans_producer.h"

namespace epk::describe {
namespace {

bool all_zero(std::span<const float> v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; });
}

void add_bad_tiles(const std::vector<rans::TileFaultRecord>& faults, TensorCheck& c) {
  for (const auto& f : faults) c.bad_tiles.push_back({f.tile, std::string(rans::tile_fault_name(f.fault))});
}

// Decodes every tile of p's stream; corrupt tiles into c. With f32, also the reconstruction (cleared on failure).
void check_stream(const serve::LatticeRansProducer& p, const std::string& where, const CheckOptions& o,
                  TensorCheck& c, std::vector<float>* f32) {
  const auto& s = p.stream();
  c.tiles = s.tiles();
  if (o.gpu) {
    std::vector<float> local;
    auto& out = f32 ? *f32 : local;
    if (auto sized = resize_for_tensor(out, std::uint64_t(s.rows) * s.cols, where + ": float32 weights"); !sized) {
      c.problems.push_back(sized.error().message);
      return;
    }
    std::vector<rans::TileFaultRecord> faults;
    auto stat = o.gpu(p, std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(out.data()), out.size() * 4),
                      &faults);
    add_bad_tiles(faults, c);
    if (!stat && faults.empty()) c.problems.push_back(stat.error().message);
    if (!stat && f32) f32->clear();
    return;
  }
  if (f32) {
    if (auto sized = resize_for_tensor(*f32, std::uint64_t(s.rows) * s.cols, where + ": float32 weights"); !sized) {
      c.problems.push_back(sized.error().message);
      return;
    }
    std::vector<rans::TileFaultRecord> faults;
    auto stat = rans::decode(s, where, DType::kF32,
                             std::span<std::byte>(reinterpret_cast<std::byte*>(f32->data()), f32->size() * 4),
                             o.threads, &faults);
    add_bad_tiles(faults, c);
    if (!stat && faults.empty()) c.problems.push_back(stat.error().message);
    if (!stat) f32->clear();
    return;
  }
  auto faults = rans::check_tiles(s, where, o.threads);
  if (!faults) {
    c.problems.push_back(faults.error().message);
    return;
  }
  add_bad_tiles(*faults, c);
}

// The error against the source (decoded and ref of one size): the relative L2 error, the H-weighted one where the
// statistics have the tensor, and the ceiling where the encoding records a target rate.
void check_error(const container::TensorEntry& t, const std::string& where, const std::vector<float>& decoded,
                 const std::vector<float>& ref, bool has_target, const CheckOptions& o, TensorCheck& c) {
  c.rel_l2 = relative_l2(decoded, ref);
  if (const rate::HessianView* h = o.calibration ? o.calibration->find(t.name) : nullptr)
    c.h_rel = rate::h_weighted_relative_error(ref, decoded, ref.size() / h->cols, *h, o.threads);
  if (all_zero(decoded) && !all_zero(ref)) {
    c.problems.push_back(where + ": decodes to all zeros where the source is not");
    return;
  }
  if (!has_target || (c.calibrated && !c.h_rel)) return;
  // The ceiling at the tensor's target rate (its stored rate when no target was recorded, as for streams imported
  // from the reference package). A calibrated tensor is judged by its H-weighted error, as compress judged it
  // (docs/FORMAT.md 12.4), so only when its statistics are given.
  const double rate =
      c.target > 0 ? c.target : 8.0 * double(c.stored) / double(std::max<std::uint64_t>(c.weights, 1));
  const double ceiling = o.max_error.value_or(rate::default_max_rel_l2(rate));
  c.max_error = ceiling;
  const double e = c.calibrated ? *c.h_rel : *c.rel_l2;
  if (!(e <= ceiling)) {
    char buf[160];
    std::snprintf(buf, sizeof buf, ": %s error %.4f%% is above the ceiling %.4f%%",
                  c.calibrated ? "H-weighted relative L2" : "relative L2", 100.0 * e, 100.0 * ceiling);
    c.problems.push_back(where + buf);
  }
}

}  // namespace

TensorCheck check_tensor(const container::Reader& reader, const container::TensorEntry& t, const CheckOptions& o) {
  TensorCheck c;
  c.name = t.name;
  c.encoding = std::string(container::encoding_name(t.encoding));
  c.weights = t.element_count();
  c.stored = rans::stored_bytes(t);
  const std::string where = reader.path() + ": tensor '" + t.name + "'";
  if (auto st = reader.verify(t); !st) c.problems.push_back(st.error().message);
  const safetensors::TensorView* src = nullptr;
  if (o.source) {
    src = o.source->find(t.name);
    if (!src) {
      c.problems.push_back(where + ": not in " + o.source_name);
    } else if (src->shape != t.shape) {
      c.problems.push_back(where + ": shape " + shape_string(t.shape) + " differs from the source's " + shape_string(src->shape));
      src = nullptr;
    }
  }
  std::vector<float> decoded;
  bool have_decoded = false, has_target = false;
  const bool plain = decode::stored_as(t, t.dtype);
  if (t.encoding == container::Encoding::kLatticeRans) {
    auto stored = rans::from_container(reader, t);
    if (!stored) {
      c.problems.push_back(stored.error().message);
    } else {
      c.target = stored->info.target_bpp;
      c.calibrated = stored->info.calibrated;
      has_target = true;
      const serve::LatticeRansProducer producer(reader, t, reader.path(), std::move(*stored));
      check_stream(producer, where, o, c, src ? &decoded : nullptr);
      have_decoded = src && !decoded.empty();
    }
  } else if (src || !plain) {
    // Every tensor that is not stored as plain bytes is decoded, source or not: a tensor reported ok must be one
    // that decompress, convert and epkd can read.
    auto d = decode::decode_tensor_f32(reader, t);
    if (d) {
      decoded = std::move(*d);
      have_decoded = src != nullptr;
    } else if (src && plain && src->dtype == t.dtype) {
      // A plain tensor of a non-float dtype: compared byte for byte.
      auto bytes = reader.buffer(t, 0);
      const bool same = bytes.size() == src->data.size() && std::equal(bytes.begin(), bytes.end(), src->data.begin());
      c.rel_l2 = same ? 0.0 : 1.0;
      if (!same) c.problems.push_back(where + ": raw bytes differ from the source");
    } else {
      c.problems.push_back(d.error().message);
    }
  }
  if (have_decoded) {
    auto ref = source_f32(*src);
    if (ref) {
      check_error(t, where, decoded, *ref, has_target, o, c);
    } else {
      c.problems.push_back(ref.error().message);
    }
    if (plain && c.rel_l2 && *c.rel_l2 != 0.0) c.problems.push_back(where + ": raw tensor differs from the source");
  }
  for (const auto& [tile, why] : c.bad_tiles)
    c.problems.push_back(where + ": tile " + std::to_string(tile) + " is corrupt (" + why + ")");
  return c;
}

double relative_l2(std::span<const float> x, std::span<const float> ref) {
  double num = 0, den = 0;
  const std::size_t n = std::min(x.size(), ref.size());
  for (std::size_t i = 0; i < n; ++i) {
    const double d = double(x[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  if (den == 0) return num == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(num / den);
}

Result<std::vector<float>> source_f32(const safetensors::TensorView& t) {
  std::uint64_t n = 1;
  for (auto d : t.shape) n *= d;
  std::vector<float> out(n);
  if (!decode::raw_to_f32(t.dtype, t.data, out))
    return make_error(ErrorCode::kUnsupported,
                      "tensor '" + t.name + "': dtype " + std::string(dtype_name(t.dtype)) + " is not a float dtype");
  return out;
}

}  // namespace epk::describe
