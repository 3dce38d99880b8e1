#include "daemon/sources/synthetic_source.h"

#include <charconv>
#include <cstring>
#include <thread>

#include "codec/common/bytes.h"

namespace epk::daemon {
namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

Result<std::uint64_t> parse_dim(std::string_view s, const std::string& item) {
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v == 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "synthetic spec item '" + item + "': bad dimension '" + std::string(s) + "'");
  }
  return v;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

}  // namespace

float synthetic_value(std::uint32_t tensor, std::uint64_t index) {
  std::uint64_t h = splitmix64((static_cast<std::uint64_t>(tensor) << 40) ^ index);
  auto k = static_cast<std::int32_t>((h >> 40) % 4096) - 2048;
  return static_cast<float>(k) / 1024.0f;
}

std::uint16_t f32_to_bf16(float v) {
  std::uint32_t b;
  std::memcpy(&b, &v, 4);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((b >> 16) | 0x40);  // quiet NaN
  std::uint32_t rounding = 0x7FFFu + ((b >> 16) & 1u);
  return static_cast<std::uint16_t>((b + rounding) >> 16);
}

std::uint16_t f32_to_f16(float v) {
  std::uint32_t b;
  std::memcpy(&b, &v, 4);
  std::uint32_t sign = (b >> 16) & 0x8000u;
  std::uint32_t exp = (b >> 23) & 0xFFu;
  std::uint32_t man = b & 0x7FFFFFu;
  if (exp == 0xFF) return static_cast<std::uint16_t>(sign | 0x7C00u | (man != 0 ? 0x200u : 0u));
  int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 31) return static_cast<std::uint16_t>(sign | 0x7C00u);  // overflow to infinity
  if (e <= 0) {
    if (e < -10) return static_cast<std::uint16_t>(sign);  // below half the smallest subnormal
    man |= 0x800000u;
    int shift = 14 - e;  // 13 + (1 - e)
    std::uint32_t half = 1u << (shift - 1);
    std::uint32_t rest = man & ((1u << shift) - 1);
    std::uint32_t r = man >> shift;
    if (rest > half || (rest == half && (r & 1u))) ++r;
    return static_cast<std::uint16_t>(sign | r);
  }
  std::uint32_t r = (static_cast<std::uint32_t>(e) << 10) | (man >> 13);
  std::uint32_t rest = man & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (r & 1u))) ++r;  // may carry into the exponent: still correct
  return static_cast<std::uint16_t>(sign | r);
}

Result<std::unique_ptr<SyntheticSource>> SyntheticSource::create(const std::string& spec,
                                                                 std::chrono::microseconds delay) {
  std::unique_ptr<SyntheticSource> s(new SyntheticSource());
  s->origin_ = "synthetic:" + spec;
  s->delay_ = delay;
  if (spec.empty()) return make_error(ErrorCode::kInvalidArgument, "synthetic spec is empty");
  for (std::string_view item : split(spec, ',')) {
    std::string item_s(item);
    auto parts = split(item, ':');
    bool corrupt = false;
    if (parts.size() > 1 && parts.back() == "corrupt") {
      corrupt = true;
      parts.pop_back();
    }
    TensorMeta t;
    t.encoding = "synthetic";
    std::string_view dims;
    if (parts.size() == 1) {
      t.name = "t" + std::to_string(s->tensors_.size());
      dims = parts[0];
    } else if (parts.size() == 2 && !parts[0].empty()) {
      t.name = std::string(parts[0]);
      dims = parts[1];
    } else {
      return make_error(ErrorCode::kInvalidArgument, "synthetic spec item '" + item_s + "': expected [NAME:]RxC");
    }
    std::uint64_t elems = 1;
    for (std::string_view d : split(dims, 'x')) {
      EPK_TRY_ASSIGN(std::uint64_t v, parse_dim(d, item_s));
      t.shape.push_back(v);
      if (!checked_mul(elems, v, &elems) || elems > (std::uint64_t{1} << 36)) {
        return make_error(ErrorCode::kInvalidArgument, "synthetic spec item '" + item_s + "': too large");
      }
    }
    if (t.shape.size() > 4)
      return make_error(ErrorCode::kInvalidArgument, "synthetic spec item '" + item_s + "': >4 dims");
    for (const TensorMeta& other : s->tensors_) {
      if (other.name == t.name) return make_error(ErrorCode::kInvalidArgument, "synthetic spec: duplicate " + t.name);
    }
    t.dtype = DType::kF32;
    t.stored_bytes = elems * 4;
    s->tensors_.push_back(std::move(t));
    s->corrupt_.push_back(corrupt);
  }
  return s;
}

Result<ServedTensor> SyntheticSource::served(std::size_t tensor, shm::Layout layout) const {
  if (tensor >= tensors_.size()) return make_error(ErrorCode::kNotFound, origin_ + ": tensor index out of range");
  const TensorMeta& t = tensors_[tensor];
  ServedTensor out;
  out.shape = t.shape;
  out.strides = row_major_strides(t.shape);
  std::uint64_t elems = t.stored_bytes / 4;
  switch (layout) {
    case shm::Layout::kStored:
    case shm::Layout::kDenseF32:
      out.dtype = DType::kF32;
      out.bytes = elems * 4;
      break;
    case shm::Layout::kDenseBF16:
      out.dtype = DType::kBF16;
      out.bytes = elems * 2;
      break;
    case shm::Layout::kDenseF16:
      out.dtype = DType::kF16;
      out.bytes = elems * 2;
      break;
    default:
      return make_error(ErrorCode::kUnsupported, origin_ + ": tensor '" + t.name + "': layout " +
                                                     std::string(shm::layout_name(layout)) + " is not served");
  }
  return out;
}

Status SyntheticSource::produce(std::size_t tensor, shm::Layout layout, std::span<std::uint8_t> dst) const {
  produce_count_.fetch_add(1);
  EPK_TRY_ASSIGN(ServedTensor st, served(tensor, layout));
  const TensorMeta& t = tensors_[tensor];
  if (dst.size() != st.bytes) {
    return make_error(ErrorCode::kInternal, origin_ + ": tensor '" + t.name + "': destination holds " +
                                                std::to_string(dst.size()) + " bytes, need " +
                                                std::to_string(st.bytes));
  }
  if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
  if (corrupt_[tensor]) {
    return make_error(ErrorCode::kCorruptTile,
                      origin_ + ": tensor '" + t.name + "': tile 0 did not decode (synthetic corruption)");
  }
  const std::uint64_t elems = t.stored_bytes / 4;
  const auto idx = static_cast<std::uint32_t>(tensor);
  switch (st.dtype) {
    case DType::kF32:
      for (std::uint64_t i = 0; i < elems; ++i) store_le<float>(dst.data() + i * 4, synthetic_value(idx, i));
      break;
    case DType::kBF16:
      for (std::uint64_t i = 0; i < elems; ++i)
        store_le<std::uint16_t>(dst.data() + i * 2, f32_to_bf16(synthetic_value(idx, i)));
      break;
    case DType::kF16:
      for (std::uint64_t i = 0; i < elems; ++i)
        store_le<std::uint16_t>(dst.data() + i * 2, f32_to_f16(synthetic_value(idx, i)));
      break;
    default: return make_error(ErrorCode::kInternal, origin_ + ": unexpected served dtype");
  }
  return {};
}

}  // namespace epk::daemon
