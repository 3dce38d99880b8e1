#include "codec/layouts/bnb.h"

#include <nlohmann/json.hpp>

#include "codec/common/half.h"
#include "codec/layouts/layout_util.h"

namespace epk::layouts::bnb {
namespace {

using detail::bad;
using detail::sz;

}  // namespace

const std::array<float, 16> kNf4Levels = {
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f,
    -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f,
    0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f,
    1.0f};
const std::array<float, 16> kFp4Levels = {
    0.0f, 0.0052083334885537624f, 0.6666666865348816f, 1.0f, 0.3333333432674408f, 0.5f, 0.1666666716337204f, 0.25f,
    0.0f, -0.0052083334885537624f, -0.6666666865348816f, -1.0f, -0.3333333432674408f, -0.5f, -0.1666666716337204f,
    -0.25f};

std::int64_t State::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

Result<State> read_state(const Views& v) {
  State s;
  constexpr DType kU8[] = {DType::kU8};
  const std::int64_t any1[] = {-1};
  EPK_TRY(check_view(v.quant_state, "quant_state", kU8, any1));
  const std::string text(v.quant_state.bytes.begin(), v.quant_state.bytes.end());
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return bad(v.quant_state, "not a JSON object");
  auto get_string = [&](const char* key) -> std::optional<std::string> {
    auto it = j.find(key);
    if (it == j.end() || !it->is_string()) return std::nullopt;
    return it->get<std::string>();
  };
  const auto qt = get_string("quant_type");
  if (!qt || (*qt != "nf4" && *qt != "fp4")) return bad(v.quant_state, "quant_type missing or not nf4/fp4");
  s.type = *qt == "nf4" ? QuantType::kNf4 : QuantType::kFp4;
  s.code = s.type == QuantType::kNf4 ? kNf4Levels : kFp4Levels;
  auto bs = j.find("blocksize");
  if (bs == j.end() || !bs->is_number_integer() || bs->get<std::int64_t>() < 1 || bs->get<std::int64_t>() > (1 << 20)) {
    return bad(v.quant_state, "blocksize missing or out of range");
  }
  s.blocksize = bs->get<std::int64_t>();
  const auto dt = get_string("dtype");
  if (dt == "bfloat16") s.dtype = DType::kBF16;
  else if (dt == "float16") s.dtype = DType::kF16;
  else if (dt == "float32") s.dtype = DType::kF32;
  else return bad(v.quant_state, "dtype missing or not bfloat16/float16/float32");
  auto sh = j.find("shape");
  if (sh == j.end() || !sh->is_array() || sh->empty() || sh->size() > 8) return bad(v.quant_state, "shape missing");
  std::uint64_t numel = 1;
  for (const auto& d : *sh) {
    if (!d.is_number_integer() || d.get<std::int64_t>() < 0 ||
        !checked_mul(numel, static_cast<std::uint64_t>(d.get<std::int64_t>()), &numel) || numel > (1ull << 40)) {
      return bad(v.quant_state, "shape entry out of range");
    }
    s.shape.push_back(d.get<std::int64_t>());
  }
  const std::int64_t blocks = (static_cast<std::int64_t>(numel) + s.blocksize - 1) / s.blocksize;

  const std::int64_t wshape[] = {static_cast<std::int64_t>((numel + 1) / 2), 1};
  EPK_TRY(check_view(v.weight, "weight", kU8, wshape));
  if (v.quant_map) {
    constexpr DType kF32[] = {DType::kF32};
    const std::int64_t sixteen[] = {16};
    EPK_TRY(check_view(*v.quant_map, "quant_map", kF32, sixteen));
    for (std::size_t i = 0; i < 16; ++i) s.code[i] = load_le<float>(v.quant_map->bytes.data() + 4 * i);
  }
  const std::int64_t bshape[] = {blocks};
  if (v.absmax.dtype == DType::kU8) {
    // Double quantization.
    if (!v.nested_absmax || !v.nested_quant_map) return bad(v.absmax, "U8 absmax without nested_absmax/quant_map");
    EPK_TRY(check_view(v.absmax, "absmax", kU8, bshape));
    auto nbs = j.find("nested_blocksize");
    auto off = j.find("nested_offset");
    if (nbs == j.end() || !nbs->is_number_integer() || nbs->get<std::int64_t>() < 1 ||
        nbs->get<std::int64_t>() > (1 << 20) || off == j.end() || !off->is_number()) {
      return bad(v.quant_state, "nested_blocksize or nested_offset missing");
    }
    const std::int64_t nested_bs = nbs->get<std::int64_t>();
    // nested_offset is printed from a float32 by Python's json (a double repr of it): narrowing is exact.
    const float offset = static_cast<float>(off->get<double>());
    constexpr DType kF32[] = {DType::kF32};
    const std::int64_t nshape[] = {(blocks + nested_bs - 1) / nested_bs};
    const std::int64_t map_shape[] = {256};
    EPK_TRY(check_view(*v.nested_absmax, "nested_absmax", kF32, nshape));
    EPK_TRY(check_view(*v.nested_quant_map, "nested_quant_map", kF32, map_shape));
    s.absmax.resize(sz(blocks));
    for (std::int64_t b = 0; b < blocks; ++b) {
      const float code = load_le<float>(v.nested_quant_map->bytes.data() + 4 * v.absmax.bytes[sz(b)]);
      const float scale = load_le<float>(v.nested_absmax->bytes.data() + 4 * sz(b / nested_bs));
      const float prod = code * scale;  // rounded to float32 before the offset is added, as bitsandbytes does
      s.absmax[sz(b)] = prod + offset;
    }
    s.double_quant = true;
  } else {
    constexpr DType kF32[] = {DType::kF32};
    EPK_TRY(check_view(v.absmax, "absmax", kF32, bshape));
    s.absmax = detail::floats_of(v.absmax);
  }
  return s;
}

Result<std::vector<float>> dequantize_f32(const TensorView& weight, const State& s) {
  const std::int64_t n = s.numel();
  if (weight.bytes.size() != sz((n + 1) / 2) ||
      s.absmax.size() != sz((n + s.blocksize - 1) / s.blocksize)) {
    return bad(weight, "size does not match the quant state");
  }
  std::vector<float> out(sz(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint8_t byte = weight.bytes[sz(i / 2)];
    const int nibble = (i % 2 == 0) ? (byte >> 4) : (byte & 0xF);  // high nibble first
    // A table lookup for FP4 too: code 8 gives +0.0 as bitsandbytes' vectorised CPU kernel and Python fallback do
    // (its scalar CPU kernel computes -0.0 there; the values are equal).
    out[sz(i)] = s.code[sz(nibble)] * s.absmax[sz(i / s.blocksize)];
  }
  return out;
}

Result<std::vector<std::uint16_t>> dequantize_16(const TensorView& weight, const State& s) {
  if (s.dtype != DType::kBF16 && s.dtype != DType::kF16) return bad(weight, "dtype is not bf16/f16");
  EPK_TRY_ASSIGN(std::vector<float> f, dequantize_f32(weight, s));
  std::vector<std::uint16_t> out(f.size());
  for (std::size_t i = 0; i < f.size(); ++i) out[i] = s.dtype == DType::kBF16 ? f32_to_bf16(f[i]) : f32_to_f16(f[i]);
  return out;
}

}  // namespace epk::layouts::bnb
