// GGUF block types dequantized to float32 (gguf.h: dequantize_supported, dequantize, scale fields), bit for bit as
// gguf-py's numpy dequantizers compute them. The file's parsing is gguf.cc.
#include <algorithm>
#include <cstring>

#include "codec/common/bytes.h"
#include "codec/common/half.h"
#include "codec/layouts/gguf.h"

namespace epk::layouts::gguf {

namespace {

float f16_at(const std::uint8_t* p) { return f16_to_f32(load_le<std::uint16_t>(p)); }

// Q4_K / Q5_K: 6-bit scale and min of sub-block j from the 12 packed bytes.
void scale_min_k4(int j, const std::uint8_t* q, std::uint8_t* sc, std::uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<std::uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<std::uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Each function dequantizes one block. Products are formed exactly as gguf-py forms them (float32, same grouping),
// so results are bit-identical: every product here is exact in float32 and only the final +/- rounds (an f16
// scale has 11 significant bits; times a sub-block scale of at most 8 bits and a code of at most 7 the product
// needs at most 24: IQ4_XS's 11 + 6 + 7 is the widest), so a fused multiply-add gives the same result too.
void q4_0(const std::uint8_t* b, float* y) {
  const float d = f16_at(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>((b[2 + j] & 0xF) - 8);
    y[j + 16] = d * static_cast<float>((b[2 + j] >> 4) - 8);
  }
}

void q4_1(const std::uint8_t* b, float* y) {
  const float d = f16_at(b), m = f16_at(b + 2);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(b[4 + j] & 0xF) + m;
    y[j + 16] = d * static_cast<float>(b[4 + j] >> 4) + m;
  }
}

void q8_0(const std::uint8_t* b, float* y) {
  const float d = f16_at(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<std::int8_t>(b[2 + j])) * d;
}

// Q5_0 / Q5_1: element j's fifth bit is bit j of the little-endian u32 qh; the low four bits split each byte of qs
// into elements j (low nibble) and j + 16 (high nibble), as in Q4_0.
int q5_code(const std::uint8_t* qh_bytes, const std::uint8_t* qs, int j) {
  const std::uint32_t qh = load_le<std::uint32_t>(qh_bytes);
  const int low = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
  return low | static_cast<int>(((qh >> j) & 1u) << 4);
}

void q5_0(const std::uint8_t* b, float* y) {
  const float d = f16_at(b);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(q5_code(b + 2, b + 6, j) - 16);
}

void q5_1(const std::uint8_t* b, float* y) {
  const float d = f16_at(b), m = f16_at(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(q5_code(b + 4, b + 8, j)) + m;
}

// Q2_K: scales[16] (low nibble: scale, high nibble: min, one pair per 16 elements), qs[64] (2-bit codes), d, dmin.
// Element e = 128 h + 32 k + l takes bits 2k..2k+1 of qs[32 h + l]; its sub-block is e / 16.
void q2_k(const std::uint8_t* b, float* y) {
  const std::uint8_t* scales = b;
  const std::uint8_t* qs = b + 16;
  const float d = f16_at(b + 80), dmin = f16_at(b + 82);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    const int q = (qs[32 * h + l] >> (2 * k)) & 3;
    const std::uint8_t sc = scales[e / 16];
    const float dl = d * static_cast<float>(sc & 0xF), ml = dmin * static_cast<float>(sc >> 4);
    y[e] = dl * static_cast<float>(q) - ml;
  }
}

// Q3_K: hmask[32], qs[64], scales[12] (sixteen 6-bit signed scales, offset 32), d. Element e's low two bits are
// bits 2k..2k+1 of qs[32 h + l] (e = 128 h + 32 k + l); its high bit is bit e / 32 of hmask[e % 32], and a clear
// high bit subtracts 4. Scale i: low nibble of scales[i % 8] (i < 8) or its high nibble (i >= 8), and bits
// 2 (i / 4)..+1 of scales[8 + i % 4] as bits 4..5.
void q3_k(const std::uint8_t* b, float* y) {
  const std::uint8_t* hmask = b;
  const std::uint8_t* qs = b + 32;
  const std::uint8_t* sc = b + 96;
  const float d = f16_at(b + 108);
  float dl[16];
  for (int i = 0; i < 16; ++i) {
    const int low = (sc[i % 8] >> (4 * (i / 8))) & 0xF;
    const int high = (sc[8 + i % 4] >> (2 * (i / 4))) & 3;
    dl[i] = d * static_cast<float>((low | (high << 4)) - 32);
  }
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    const int low = (qs[32 * h + l] >> (2 * k)) & 3;
    const int high = (hmask[l] >> (e / 32)) & 1;
    y[e] = dl[e / 16] * static_cast<float>(low - ((high ^ 1) << 2));
  }
}

// IQ4_NL / IQ4_XS: 4-bit indices into ggml's non-uniform table kvalues_iq4nl.
constexpr std::int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

void iq4_nl(const std::uint8_t* b, float* y) {
  const float d = f16_at(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(kIq4Values[b[2 + j] & 0xF]);
    y[j + 16] = d * static_cast<float>(kIq4Values[b[2 + j] >> 4]);
  }
}

// IQ4_XS: d, scales_h (u16: bits 2 i..2 i+1 are bits 4..5 of sub-block i's scale), scales_l[4] (nibble i % 2 of
// byte i / 2: bits 0..3), qs[128]; eight sub-blocks of 32, scale offset 32. Sub-block i's element j is nibble j / 16
// of qs[16 i + j % 16].
void iq4_xs(const std::uint8_t* b, float* y) {
  const float d = f16_at(b);
  const std::uint16_t scales_h = load_le<std::uint16_t>(b + 2);
  const std::uint8_t* scales_l = b + 4;
  const std::uint8_t* qs = b + 8;
  for (int i = 0; i < 8; ++i) {
    const int low = (scales_l[i / 2] >> (4 * (i % 2))) & 0xF;
    const int high = (scales_h >> (2 * i)) & 3;
    const float dl = d * static_cast<float>((low | (high << 4)) - 32);
    for (int j = 0; j < 32; ++j) {
      const int q = (qs[16 * i + j % 16] >> (4 * (j / 16))) & 0xF;
      y[32 * i + j] = dl * static_cast<float>(kIq4Values[q]);
    }
  }
}

// Q4_K / Q5_K: d, dmin, scales[12] (scale_min_k4), then Q5_K's qh[32] (bit s of qh[l] is the fifth bit of element
// 32 s + l), then qs[128] (sub-block s takes nibble s % 2 of qs[32 (s / 2) + l]). qh null: Q4_K.
void k_quant(const std::uint8_t* b, const std::uint8_t* qh, const std::uint8_t* qs, float* y) {
  const float d = f16_at(b), dmin = f16_at(b + 2);
  const std::uint8_t* scales = b + 4;
  for (int s = 0; s < 8; ++s) {
    std::uint8_t sc, m;
    scale_min_k4(s, scales, &sc, &m);
    const float ds = d * static_cast<float>(sc), dm = dmin * static_cast<float>(m);
    const std::uint8_t* q = qs + 32 * (s / 2);
    const int shift = (s % 2) * 4;
    for (int l = 0; l < 32; ++l) {
      const int high = qh != nullptr ? ((qh[l] >> s) & 1) << 4 : 0;
      y[32 * s + l] = ds * static_cast<float>(((q[l] >> shift) & 0xF) | high) - dm;
    }
  }
}

void q4_k(const std::uint8_t* b, float* y) { k_quant(b, nullptr, b + 16, y); }
void q5_k(const std::uint8_t* b, float* y) { k_quant(b, b + 16, b + 48, y); }

void q6_k(const std::uint8_t* b, float* y) {
  const std::uint8_t* ql = b;
  const std::uint8_t* qh = b + 128;
  const std::uint8_t* sc = b + 192;
  const float d = f16_at(b + 208);
  for (int e = 0; e < 256; ++e) {
    const int n = e / 128, t = (e % 128) / 32, l = e % 32;
    const std::uint8_t lo = ql[64 * n + 32 * (t & 1) + l];
    const int low4 = t < 2 ? (lo & 0xF) : (lo >> 4);
    const int hi2 = (qh[32 * n + l] >> (2 * t)) & 3;
    const float ds = d * static_cast<float>(static_cast<std::int8_t>(sc[e / 16]));
    y[e] = ds * static_cast<float>((low4 | (hi2 << 4)) - 32);
  }
}

using BlockFn = void (*)(const std::uint8_t*, float*);

BlockFn block_dequantizer(std::uint32_t ggml_type) {
  switch (static_cast<GgmlType>(ggml_type)) {
    case GgmlType::kQ4_0: return q4_0;
    case GgmlType::kQ4_1: return q4_1;
    case GgmlType::kQ5_0: return q5_0;
    case GgmlType::kQ5_1: return q5_1;
    case GgmlType::kQ8_0: return q8_0;
    case GgmlType::kQ2_K: return q2_k;
    case GgmlType::kQ3_K: return q3_k;
    case GgmlType::kQ4_K: return q4_k;
    case GgmlType::kQ5_K: return q5_k;
    case GgmlType::kQ6_K: return q6_k;
    case GgmlType::kIQ4_NL: return iq4_nl;
    case GgmlType::kIQ4_XS: return iq4_xs;
    default: return nullptr;
  }
}

bool plain_float(std::uint32_t ggml_type) {
  const auto t = static_cast<GgmlType>(ggml_type);
  return t == GgmlType::kF32 || t == GgmlType::kF16 || t == GgmlType::kBF16;
}

// The f16 per-block float fields of a block type: byte offset and name, as ggml's block structs name them.
struct ScaleField {
  std::uint32_t offset;
  const char* name;
};

std::span<const ScaleField> scale_fields(std::uint32_t ggml_type) {
  static constexpr ScaleField kD0[] = {{0, "d"}};
  static constexpr ScaleField kDM[] = {{0, "d"}, {2, "m"}};
  static constexpr ScaleField kDDmin[] = {{0, "d"}, {2, "dmin"}};
  static constexpr ScaleField kQ2K[] = {{80, "d"}, {82, "dmin"}};
  static constexpr ScaleField kQ3K[] = {{108, "d"}};
  static constexpr ScaleField kQ6K[] = {{208, "d"}};
  switch (static_cast<GgmlType>(ggml_type)) {
    case GgmlType::kQ4_0: case GgmlType::kQ5_0: case GgmlType::kQ8_0: case GgmlType::kIQ4_NL: case GgmlType::kIQ4_XS:
      return kD0;
    case GgmlType::kQ4_1: case GgmlType::kQ5_1: return kDM;
    case GgmlType::kQ4_K: case GgmlType::kQ5_K: return kDDmin;
    case GgmlType::kQ2_K: return kQ2K;
    case GgmlType::kQ3_K: return kQ3K;
    case GgmlType::kQ6_K: return kQ6K;
    default: return {};
  }
}

Result<TypeTraits> checked_blocks(std::uint32_t ggml_type, std::span<const std::uint8_t> data,
                                  std::uint64_t n_elements, const char* what) {
  const auto traits = type_traits(ggml_type);
  if (!traits) return make_error(ErrorCode::kUnsupported, std::string(what) + ": ggml type " + std::to_string(ggml_type));
  if (n_elements % traits->block_size != 0 || n_elements > (1ull << 40)) {
    return make_error(ErrorCode::kInvalidArgument,
                      std::string(what) + ": " + std::to_string(n_elements) + " elements of " + traits->name);
  }
  const std::uint64_t blocks = n_elements / traits->block_size;
  if (data.size() != blocks * traits->type_size) {
    return make_error(ErrorCode::kInvalidArgument, std::string(what) + ": " + traits->name + " needs " +
                                                       std::to_string(blocks * traits->type_size) + " bytes, got " +
                                                       std::to_string(data.size()));
  }
  return *traits;
}

}  // namespace

bool dequantize_supported(std::uint32_t ggml_type) {
  return plain_float(ggml_type) || block_dequantizer(ggml_type) != nullptr;
}

Status check_block_scales(std::uint32_t ggml_type, std::span<const std::uint8_t> data, std::uint64_t n_elements,
                          std::string_view label) {
  EPK_TRY_ASSIGN(TypeTraits traits, checked_blocks(ggml_type, data, n_elements, "gguf check_block_scales"));
  if (!dequantize_supported(ggml_type)) {
    return make_error(ErrorCode::kUnsupported,
                      std::string(label) + ": " + traits.name + " is not supported by this build");
  }
  const auto fields = scale_fields(ggml_type);
  const std::uint64_t blocks = n_elements / traits.block_size;
  for (std::uint64_t i = 0; i < blocks; ++i) {
    const std::uint8_t* b = data.data() + i * traits.type_size;
    for (const ScaleField& f : fields) {
      const std::uint16_t bits = load_le<std::uint16_t>(b + f.offset);
      if ((bits & 0x7C00u) != 0x7C00u) continue;  // exponent not all ones: finite
      char hex[8];
      std::snprintf(hex, sizeof hex, "%04x", bits);
      return make_error(ErrorCode::kBadInput,
                        std::string(label) + ": " + traits.name + " block " + std::to_string(i) + " (elements " +
                            std::to_string(i * traits.block_size) + ".." +
                            std::to_string((i + 1) * traits.block_size - 1) + "): field " + f.name + " is " +
                            ((bits & 0x03FFu) ? "NaN" : "infinite") + " (f16 0x" + hex + ")");
    }
  }
  return {};
}

Result<std::vector<float>> dequantize(std::uint32_t ggml_type, std::span<const std::uint8_t> data,
                                      std::uint64_t n_elements) {
  EPK_TRY_ASSIGN(TypeTraits t, checked_blocks(ggml_type, data, n_elements, "gguf dequantize"));
  const TypeTraits* traits = &t;
  const std::uint64_t blocks = n_elements / traits->block_size;
  BlockFn block_fn = nullptr;
  std::vector<float> out(n_elements);
  switch (static_cast<GgmlType>(ggml_type)) {
    case GgmlType::kF32:
      if (n_elements) std::memcpy(out.data(), data.data(), data.size());
      return out;
    case GgmlType::kF16:
      for (std::uint64_t i = 0; i < n_elements; ++i) out[i] = f16_at(data.data() + 2 * i);
      return out;
    case GgmlType::kBF16:
      for (std::uint64_t i = 0; i < n_elements; ++i) out[i] = bf16_to_f32(load_le<std::uint16_t>(data.data() + 2 * i));
      return out;
    default:
      block_fn = block_dequantizer(ggml_type);
      if (!block_fn) {
        return make_error(ErrorCode::kUnsupported,
                          std::string("gguf dequantize: ") + traits->name + " is not supported by this build");
      }
  }
  for (std::uint64_t i = 0; i < blocks; ++i) {
    block_fn(data.data() + i * traits->type_size, out.data() + i * traits->block_size);
  }
  return out;
}

}  // namespace epk::layouts::gguf
