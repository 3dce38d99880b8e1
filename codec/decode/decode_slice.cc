#include "codec/decode/decode_slice.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "codec/decode/decode_tensor.h"
#include "codec/rans/container_io.h"

namespace epk::decode {
namespace {

std::string where_of(const container::Reader& r, const container::TensorEntry& e) {
  return r.path() + ": tensor '" + e.name + "'";
}

// Elements before, along and after the cut axis.
struct Geometry {
  std::uint64_t outer = 1, extent = 0, inner = 1;
};
Geometry geometry(const container::TensorEntry& e, std::size_t axis) {
  Geometry g;
  for (std::size_t i = 0; i < e.shape.size(); ++i) {
    if (i < axis) g.outer *= e.shape[i];
    else if (i == axis) g.extent = e.shape[i];
    else g.inner *= e.shape[i];
  }
  return g;
}

Status check_slice(const container::Reader& r, const container::TensorEntry& e, const Slice& s) {
  if (s.axis > 1 || s.axis >= e.shape.size() || s.begin >= s.end || s.end > e.shape[s.axis]) {
    return make_error(ErrorCode::kInvalidArgument, where_of(r, e) + ": slice [" + std::to_string(s.begin) + ", " +
                                                       std::to_string(s.end) + ") of dimension " +
                                                       std::to_string(s.axis) + " is outside its shape");
  }
  return {};
}

Status decode_raw_slice(const container::Reader& r, const container::TensorEntry& e, DType out, const Slice& s,
                        std::span<std::uint8_t> dst) {
  if (e.buffers.size() != 1) {
    return make_error(ErrorCode::kBadInput, where_of(r, e) + ": raw tensor has " + std::to_string(e.buffers.size()) +
                                                " buffers, expected 1");
  }
  const auto src = r.buffer(e, 0);
  const Geometry g = geometry(e, s.axis);
  const std::uint64_t in_w = static_cast<std::uint64_t>(dtype_bits(e.dtype)) / 8;
  const std::uint64_t out_w = static_cast<std::uint64_t>(dtype_bits(out)) / 8;
  if (src.size() != g.outer * g.extent * g.inner * in_w) {
    return make_error(ErrorCode::kBadInput, where_of(r, e) + ": raw buffer 'data' size does not match the shape");
  }
  const std::uint64_t run = (s.end - s.begin) * g.inner;  // elements of one outer index's slice
  for (std::uint64_t o = 0; o < g.outer; ++o) {
    const std::uint64_t from = (o * g.extent + s.begin) * g.inner;
    const auto in = src.subspan(from * in_w, run * in_w);
    std::uint8_t* to = dst.data() + o * run * out_w;
    if (out == e.dtype) {
      std::memcpy(to, in.data(), in.size());
    } else {
      convert_raw(e.dtype, in, out, to);
    }
  }
  return {};
}

// Column slices of lattice-rans tensors: bands of rows into `band`, the slice's columns kept. `decode_band(row0,
// row1, band_span)` decodes rows [row0, row1) into the band; elem bytes per element.
template <class DecodeBand>
Status banded_columns(std::uint32_t rows, std::uint32_t cols, std::uint64_t elem, const Slice& s,
                      std::uint64_t band_bytes, std::uint8_t* dst, DecodeBand&& decode_band) {
  const std::uint64_t row_bytes = std::uint64_t{cols} * elem;
  const auto band_rows = static_cast<std::uint32_t>(
      std::clamp<std::uint64_t>(band_bytes / std::max<std::uint64_t>(row_bytes, 1), 1, rows));
  std::vector<std::uint8_t> band(band_rows * row_bytes);
  const std::uint64_t keep = (s.end - s.begin) * elem, skip = s.begin * elem;
  for (std::uint32_t r0 = 0; r0 < rows; r0 += band_rows) {
    const std::uint32_t r1 = std::min(rows, r0 + band_rows);
    EPK_TRY(decode_band(r0, r1, std::span<std::uint8_t>(band.data(), (r1 - r0) * row_bytes)));
    for (std::uint32_t i = r0; i < r1; ++i) {
      std::memcpy(dst + i * keep, band.data() + (i - r0) * row_bytes + skip, keep);
    }
  }
  return {};
}

std::span<std::byte> bytes_of(std::span<std::uint8_t> s) {
  return {reinterpret_cast<std::byte*>(s.data()), s.size()};
}

}  // namespace

bool can_decode_slice(const container::TensorEntry& e, DType out, std::size_t axis) {
  if (axis > 1 || axis >= e.shape.size() || !can_decode(e, out)) return false;
  switch (e.encoding) {
    case container::Encoding::kRaw:
      return dtype_bits(e.dtype) % 8 == 0 && dtype_bits(out) % 8 == 0;
    case container::Encoding::kLatticeRans:
      return e.shape.size() == 2;
    default:
      return false;
  }
}

Status decode_tensor_slice(const container::Reader& r, const container::TensorEntry& e, DType out, const Slice& s,
                           std::span<std::uint8_t> dst, std::uint64_t band_bytes) {
  EPK_TRY(check_slice(r, e, s));
  if (!can_decode_slice(e, out, s.axis)) {
    return make_error(ErrorCode::kUnsupported, where_of(r, e) + ": no slice decode of " +
                                                   std::string(container::encoding_name(e.encoding)) + " " +
                                                   std::string(dtype_name(e.dtype)) + " to " +
                                                   std::string(dtype_name(out)));
  }
  const Geometry g = geometry(e, s.axis);
  const std::uint64_t want = g.outer * (s.end - s.begin) * g.inner * static_cast<std::uint64_t>(dtype_bits(out)) / 8;
  if (dst.size() != want) {
    return make_error(ErrorCode::kInvalidArgument, where_of(r, e) + ": slice output holds " +
                                                       std::to_string(dst.size()) + " bytes, the slice needs " +
                                                       std::to_string(want));
  }
  if (e.encoding == container::Encoding::kRaw) return decode_raw_slice(r, e, out, s, dst);
  EPK_TRY_ASSIGN(auto stored, rans::from_container(r, e));
  const std::string name = where_of(r, e);
  if (s.axis == 0) {
    return rans::decode_rows(stored.stream, name, out, bytes_of(dst), static_cast<std::uint32_t>(s.begin),
                             static_cast<std::uint32_t>(s.end));
  }
  EPK_TRY_ASSIGN(rans::DecodePlan plan, rans::DecodePlan::create(stored.stream, name));
  const auto elem = static_cast<std::uint64_t>(dtype_bits(out)) / 8;
  return banded_columns(stored.stream.rows, stored.stream.cols, elem, s, band_bytes, dst.data(),
                        [&](std::uint32_t r0, std::uint32_t r1, std::span<std::uint8_t> band) {
                          return plan.decode_rows(out, bytes_of(band), r0, r1);
                        });
}

Status decode_tensor_rowwise_slice(const container::Reader& r, const container::TensorEntry& e,
                                   rans::RowwiseType type, const Slice& s, std::span<std::uint8_t> values,
                                   std::span<float> row_scales, std::uint64_t band_bytes) {
  EPK_TRY(check_slice(r, e, s));
  if (!can_decode_rowwise(e)) {
    return make_error(ErrorCode::kUnsupported, where_of(r, e) + ": rowwise layouts are decoded from lattice-rans "
                                                                "2-D tensors only");
  }
  const std::uint64_t rows = s.axis == 0 ? s.end - s.begin : e.shape[0];
  const std::uint64_t cols = s.axis == 1 ? s.end - s.begin : e.shape[1];
  if (values.size() != rows * cols || row_scales.size() != rows) {
    return make_error(ErrorCode::kInvalidArgument, where_of(r, e) + ": rowwise slice buffers do not match the slice");
  }
  EPK_TRY_ASSIGN(auto stored, rans::from_container(r, e));
  const std::string name = where_of(r, e);
  if (s.axis == 0) {
    return rans::decode_rowwise(stored.stream, name, type, bytes_of(values), row_scales,
                                static_cast<std::uint32_t>(s.begin), static_cast<std::uint32_t>(s.end));
  }
  EPK_TRY_ASSIGN(rans::DecodePlan plan, rans::DecodePlan::create(stored.stream, name));
  return banded_columns(stored.stream.rows, stored.stream.cols, 1, s, band_bytes, values.data(),
                        [&](std::uint32_t r0, std::uint32_t r1, std::span<std::uint8_t> band) {
                          return plan.decode_rowwise(type, bytes_of(band), row_scales.subspan(r0, r1 - r0), r0, r1);
                        });
}

}  // namespace epk::decode
