#include "codec/decode/decode_tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "codec/common/alloc.h"
#include "codec/common/bytes.h"
#include "codec/common/half.h"
#include "codec/layouts/intq_io.h"
#include "codec/rans/container_io.h"

namespace epk::decode {
namespace {

bool raw_float(DType t) {
  return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16 || t == DType::kF8E4M3 || t == DType::kF8E5M2;
}

std::string where_of(const container::Reader& r, const container::TensorEntry& e) {
  return r.path() + ": tensor '" + e.name + "'";
}

float saturate(float v, float max) { return std::isnan(v) ? v : std::clamp(v, -max, max); }

// float32 -> out, as torch's .to() for bf16/fp16 (overflow to infinity); fp8 saturated like the decoders.
void store_f32(DType out, float v, std::uint8_t* p) {
  switch (out) {
    case DType::kF32:
      store_le<std::uint32_t>(p, std::bit_cast<std::uint32_t>(v));
      break;
    case DType::kBF16:
      store_le<std::uint16_t>(p, f32_to_bf16(v));
      break;
    case DType::kF16:
      store_le<std::uint16_t>(p, f32_to_f16(v));
      break;
    case DType::kF8E4M3:
      *p = std::isnan(v) ? 0x7f : f8e4m3_from_float(saturate(v, kF8E4M3Max));
      break;
    case DType::kF8E5M2:
      *p = std::isnan(v) ? 0x7f : f8e5m2_from_float(saturate(v, kF8E5M2Max));
      break;
    default:
      break;
  }
}

Status decode_raw(const container::Reader& r, const container::TensorEntry& e, DType out, std::span<std::uint8_t> dst) {
  if (e.buffers.size() != 1)
    return make_error(ErrorCode::kBadInput,
                      where_of(r, e) + ": raw tensor has " + std::to_string(e.buffers.size()) + " buffers, expected 1");
  auto src = r.buffer(e, 0);
  if (out == e.dtype) {
    if (src.size() != dst.size())
      return make_error(ErrorCode::kBadInput, where_of(r, e) + ": raw buffer 'data' size does not match the shape");
    if (!src.empty()) std::memcpy(dst.data(), src.data(), src.size());
    return {};
  }
  const std::uint64_t n = e.element_count();
  const std::size_t in_w = std::size_t(dtype_bits(e.dtype) / 8);
  if (src.size() != n * in_w)
    return make_error(ErrorCode::kBadInput, where_of(r, e) + ": raw buffer 'data' size does not match the shape");
  convert_raw(e.dtype, src, out, dst.data());
  return {};
}

}  // namespace

void convert_raw(DType in, std::span<const std::uint8_t> src, DType out, std::uint8_t* dst) {
  const std::size_t in_w = std::size_t(dtype_bits(in) / 8), out_w = std::size_t(dtype_bits(out) / 8);
  const std::uint64_t n = src.size() / in_w;
  constexpr std::size_t kChunk = 4096;
  float tmp[kChunk];
  for (std::uint64_t i = 0; i < n; i += kChunk) {
    const std::size_t m = std::size_t(std::min<std::uint64_t>(kChunk, n - i));
    raw_to_f32(in, src.subspan(i * in_w, m * in_w), std::span<float>(tmp, m));
    for (std::size_t k = 0; k < m; ++k) store_f32(out, tmp[k], dst + (i + k) * out_w);
  }
}

bool raw_to_f32(DType in, std::span<const std::uint8_t> src, std::span<float> dst) {
  const std::size_t n = dst.size();
  const std::uint8_t* p = src.data();
  switch (in) {
    case DType::kF32:
      for (std::size_t i = 0; i < n; ++i) dst[i] = std::bit_cast<float>(load_le<std::uint32_t>(p + 4 * i));
      return true;
    case DType::kBF16:
      for (std::size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_le<std::uint16_t>(p + 2 * i));
      return true;
    case DType::kF16:
      for (std::size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(load_le<std::uint16_t>(p + 2 * i));
      return true;
    case DType::kF8E4M3:
      for (std::size_t i = 0; i < n; ++i) dst[i] = float_from_f8e4m3(p[i]);
      return true;
    case DType::kF8E5M2:
      for (std::size_t i = 0; i < n; ++i) dst[i] = float_from_f8e5m2(p[i]);
      return true;
    case DType::kI8:
      for (std::size_t i = 0; i < n; ++i) dst[i] = float(std::int8_t(p[i]));
      return true;
    default:
      return false;
  }
}

bool can_decode(const container::TensorEntry& e, DType out) {
  switch (e.encoding) {
    case container::Encoding::kRaw:
      return out == e.dtype || (raw_float(out) && (raw_float(e.dtype) || e.dtype == DType::kI8));
    case container::Encoding::kLatticeRans:
      return rans::decode_output_supported(out);
    case container::Encoding::kIntq:
      return out == DType::kF32 || out == DType::kBF16 || out == DType::kF16;
    default:
      return false;
  }
}

Result<DType> decompress_dtype(const container::TensorEntry& e, std::optional<DType> requested,
                               std::string_view where) {
  if (e.encoding == container::Encoding::kRaw) {
    return requested && dtype_is_float(e.dtype) && can_decode(e, *requested) ? *requested : e.dtype;
  }
  const DType d = requested.value_or(e.dtype);
  if (!can_decode(e, d)) {
    return make_error(ErrorCode::kUnsupported, std::string(where) + ": tensor '" + e.name + "' (" +
                                                   std::string(container::encoding_name(e.encoding)) +
                                                   ") cannot be decoded to " + std::string(dtype_name(d)));
  }
  return d;
}

bool stored_as(const container::TensorEntry& e, DType out) {
  return e.encoding == container::Encoding::kRaw && e.dtype == out && e.buffers.size() == 1;
}

std::uint64_t decoded_bytes(const container::TensorEntry& e, DType out) {
  if (!can_decode(e, out)) return 0;
  return e.element_count() * std::uint64_t(dtype_bits(out)) / 8;
}

Status decode_tensor(const container::Reader& r, const container::TensorEntry& e, DType out,
                     std::span<std::uint8_t> dst, const DecodeTensorOptions& options) {
  if (!can_decode(e, out))
    return make_error(ErrorCode::kUnsupported,
                      where_of(r, e) + ": cannot decode " + std::string(container::encoding_name(e.encoding)) + " " +
                          std::string(dtype_name(e.dtype)) + " to " + std::string(dtype_name(out)));
  if (dst.size() != decoded_bytes(e, out))
    return make_error(ErrorCode::kInvalidArgument, where_of(r, e) + ": output holds " + std::to_string(dst.size()) +
                                                       " bytes, the tensor needs " +
                                                       std::to_string(decoded_bytes(e, out)));
  if (options.verify_checksums) EPK_TRY(r.verify(e));
  switch (e.encoding) {
    case container::Encoding::kRaw:
      return decode_raw(r, e, out, dst);
    case container::Encoding::kLatticeRans: {
      EPK_TRY_ASSIGN(auto stored, rans::from_container(r, e));
      return rans::decode(stored.stream, where_of(r, e), out,
                          std::span<std::byte>(reinterpret_cast<std::byte*>(dst.data()), dst.size()),
                          std::max(1, options.threads), options.faults);
    }
    case container::Encoding::kIntq:
      return layouts::intq::dequantize_intq(r, e, out, dst);
    default:
      return make_error(ErrorCode::kUnsupported, where_of(r, e) + ": encoding " +
                                                     std::string(container::encoding_name(e.encoding)) +
                                                     " is not decoded by this build");
  }
}

bool can_decode_rowwise(const container::TensorEntry& e) {
  return e.encoding == container::Encoding::kLatticeRans && e.shape.size() == 2;
}

Status decode_tensor_rowwise(const container::Reader& r, const container::TensorEntry& e, rans::RowwiseType type,
                             std::span<std::uint8_t> values, std::span<float> row_scales,
                             const DecodeTensorOptions& options) {
  if (!can_decode_rowwise(e))
    return make_error(ErrorCode::kUnsupported, where_of(r, e) + ": rowwise layouts are decoded from lattice-rans "
                                                                "2-D tensors only, not " +
                                                   std::string(container::encoding_name(e.encoding)));
  if (options.verify_checksums) EPK_TRY(r.verify(e));
  EPK_TRY_ASSIGN(auto stored, rans::from_container(r, e));
  return rans::decode_rowwise(stored.stream, where_of(r, e), type,
                              std::span<std::byte>(reinterpret_cast<std::byte*>(values.data()), values.size()),
                              row_scales, 0, stored.stream.rows, std::max(1, options.threads), options.faults);
}

Result<std::vector<float>> decode_tensor_f32(const container::Reader& r, const container::TensorEntry& e,
                                             const DecodeTensorOptions& options) {
  std::vector<float> out;
  EPK_TRY(resize_for_tensor(out, e.element_count(), where_of(r, e) + ": float32 weights"));
  EPK_TRY(decode_tensor(r, e, DType::kF32,
                        std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(out.data()), out.size() * 4), options));
  return out;
}

}  // namespace epk::decode
