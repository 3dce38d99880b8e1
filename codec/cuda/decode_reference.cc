#include "codec/cuda/decode_reference.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>

namespace epk::cuda {
namespace {

// Round-to-nearest-even into a binary float with `mant` mantissa bits and exponent bias `bias`, no infinities
// reached (inputs are clamped to the largest finite value first). Returns sign | exponent | mantissa.
std::uint32_t to_minifloat(float v, int mant, int bias) {
  const std::uint32_t sign = std::signbit(v) ? 1u : 0u;
  const double a = std::fabs(static_cast<double>(v));
  const int ebits_shift = mant;
  std::uint32_t mag = 0;
  if (a != 0.0) {
    int e = std::ilogb(a);                 // a in [2^e, 2^(e+1))
    e = std::max(e, 1 - bias);             // subnormal range shares the smallest normal quantum
    const double quantum = std::ldexp(1.0, e - mant);
    const double q = std::nearbyint(a / quantum);  // exact quotient; ties to even (default rounding mode)
    const double r = q * quantum;
    if (r != 0.0) {
      int er = std::ilogb(r);
      if (er < 1 - bias) {
        mag = static_cast<std::uint32_t>(r / std::ldexp(1.0, 1 - bias - mant));  // subnormal
      } else {
        const auto m = static_cast<std::uint32_t>(r / std::ldexp(1.0, er - mant)) - (1u << mant);
        mag = (static_cast<std::uint32_t>(er + bias) << ebits_shift) | m;
      }
    }
  }
  return mag | (sign << 31);  // caller places the sign
}

std::uint16_t pack16(std::uint32_t m, int total_bits) {
  return static_cast<std::uint16_t>((m & 0x7fffffffu) | ((m >> 31) << (total_bits - 1)));
}

}  // namespace

std::uint16_t float_to_bf16_bits(float v) {
  const std::uint32_t b = std::bit_cast<std::uint32_t>(v);
  return static_cast<std::uint16_t>((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

std::uint16_t float_to_fp16_bits(float v) {
  return pack16(to_minifloat(std::clamp(v, -65504.0f, 65504.0f), 10, 15), 16);
}

std::uint8_t float_to_e4m3_bits(float v) {
  return static_cast<std::uint8_t>(pack16(to_minifloat(std::clamp(v, -448.0f, 448.0f), 3, 7), 8));
}

std::uint8_t float_to_e5m2_bits(float v) {
  return static_cast<std::uint8_t>(pack16(to_minifloat(std::clamp(v, -57344.0f, 57344.0f), 2, 15), 8));
}

Status decode_reference(const rans::LatticeRansStream& s, OutputFormat format, std::uint32_t row_begin,
                        std::uint32_t row_end, std::span<std::uint8_t> out, std::span<float> row_scales,
                        std::vector<TileFaultRecord>* faults) {
  if (row_end == 0) row_end = s.rows;
  const std::uint32_t vpr = s.padded_cols / 8;
  const std::uint64_t vectors = std::uint64_t{s.rows} * vpr;
  const std::uint32_t tile_vectors = std::max<std::uint32_t>(32, s.tile_symbols / 9);
  const std::uint32_t pb = s.prob_bits;
  const std::uint32_t m = 1u << pb;
  const std::uint32_t esize = output_element_bytes(format);
  if (s.tables.size() != rans::kTables || s.scales.size() != s.rows || row_begin >= row_end || row_end > s.rows ||
      pb < 9 || pb > 15 || s.padded_cols < s.cols ||
      out.size() < std::uint64_t{row_end - row_begin} * s.cols * esize ||
      (format == OutputFormat::kInt8Rowwise && row_scales.size() < row_end - row_begin)) {
    return make_error(ErrorCode::kInvalidArgument, "decode_reference: bad geometry or buffer sizes");
  }
  const std::uint64_t tiles = s.tiles();
  if (tiles != std::max<std::uint64_t>(1, (vectors + tile_vectors - 1) / tile_vectors) ||
      s.states.size() != tiles * rans::kLanes) {
    return make_error(ErrorCode::kBadInput, "decode_reference: offsets/states do not match the tile count");
  }
  const Int8Gain gain = int8_gain(s);

  // Per table: slot -> (symbol index) and the cdf of each symbol.
  std::vector<std::vector<std::uint32_t>> sym(rans::kTables), cdf(rans::kTables);
  for (int t = 0; t < rans::kTables; ++t) {
    const rans::TableMeta& tm = s.tables[t];
    sym[t].assign(m, 0);
    cdf[t].assign(static_cast<std::size_t>(std::max(tm.alphabet, 0)) + 1, 0);
    if (tm.alphabet < 0 || tm.freq_offset < 0 ||
        static_cast<std::uint64_t>(tm.freq_offset) + static_cast<std::uint64_t>(tm.alphabet) > s.freq_tables.size()) {
      return make_error(ErrorCode::kBadInput, "decode_reference: stream_meta[" + std::to_string(t) + "] out of range");
    }
    std::uint32_t c = 0;
    for (int i = 0; i < tm.alphabet; ++i) {
      const std::uint32_t f = s.freq_tables[tm.freq_offset + i];
      for (std::uint32_t k = 0; k < f && c + k < m; ++k) sym[t][c + k] = static_cast<std::uint32_t>(i);
      c += f;
      cdf[t][i + 1] = c;
    }
    if (tm.alphabet > 0 && c != m) {
      return make_error(ErrorCode::kBadInput, "decode_reference: stream_meta[" + std::to_string(t) + "] sums to " +
                                                  std::to_string(c));
    }
  }
  auto decode_symbol = [&](int t, std::uint32_t& x) -> int {
    const std::uint32_t slot = x & (m - 1);
    if (s.tables[t].alphabet == 0) {  // as the GPU tables: value 0, frequency 1
      x = (x >> pb) + slot;
      return 0;
    }
    const std::uint32_t i = sym[t][slot];
    const std::uint32_t f = cdf[t][i + 1] - cdf[t][i];
    x = f * (x >> pb) + slot - cdf[t][i];
    return static_cast<int>(i) + s.tables[t].sym_min;
  };

  const std::uint64_t v_begin = std::uint64_t{row_begin} * vpr, v_end = std::uint64_t{row_end} * vpr;
  for (std::uint64_t tile = v_begin / tile_vectors; tile * tile_vectors < v_end; ++tile) {
    const std::uint64_t v0 = tile * tile_vectors;
    const auto count = static_cast<std::uint32_t>(std::min<std::uint64_t>(tile_vectors, vectors - v0));
    const std::uint32_t wb = s.offsets[tile], we = s.offsets[tile + 1];
    if (wb > we || we > s.payload.size()) {
      if (faults) faults->push_back({0, static_cast<std::uint32_t>(tile), TileFault::kBadOffsets});
      continue;
    }
    std::uint32_t x[rans::kLanes];
    for (int l = 0; l < rans::kLanes; ++l) x[l] = s.states[tile * rans::kLanes + l];
    std::int64_t p = we;
    bool underflow = false;
    auto renorm = [&](std::uint32_t n_valid) {
      // Lanes wrote in ascending order, so reading backwards serves the highest lane first.
      for (int l = static_cast<int>(n_valid) - 1; l >= 0; --l) {
        if (x[l] < rans::kStateLow) {
          --p;
          std::uint32_t w = 0;
          if (p >= static_cast<std::int64_t>(wb)) {
            w = s.payload[static_cast<std::size_t>(p)];
          } else {
            underflow = true;
          }
          x[l] = (x[l] << 16) | w;
        }
      }
    };
    const std::uint32_t rem = count % 32;
    std::uint32_t g_start = rem ? count - rem : count - 32;
    std::uint32_t n_valid = rem ? rem : 32;
    for (;;) {
      int c[rans::kLanes] = {};
      int z[rans::kLanes][8] = {};
      for (std::uint32_t l = 0; l < n_valid; ++l) c[l] = decode_symbol(0, x[l]);
      renorm(n_valid);
      for (int f = 0; f < 8; ++f) {
        for (std::uint32_t l = 0; l < n_valid; ++l) z[l][f] = decode_symbol(1 + 2 * f + c[l], x[l]);
        renorm(n_valid);
      }
      for (std::uint32_t l = 0; l < n_valid; ++l) {
        int par = 0;
        for (int f = 0; f < 7; ++f) par += z[l][f];
        z[l][7] = 2 * z[l][7] + (par & 1);
        const std::uint64_t vec = v0 + g_start + l;
        const auto row = static_cast<std::uint32_t>(vec / vpr);
        const auto col = static_cast<std::uint32_t>(vec % vpr) * 8;
        if (row < row_begin || row >= row_end) continue;
        const float scale = s.scales[row];
        if (format == OutputFormat::kInt8Rowwise && col == 0) {
          row_scales[row - row_begin] = scale * gain.half_over_gain;
        }
        for (std::uint32_t j = 0; j < 8 && col + j < s.cols; ++j) {
          const float pv = static_cast<float>(z[l][j]) + (c[l] ? 0.5f : 0.0f);
          const float v = pv * scale;
          const std::uint64_t e = std::uint64_t{row - row_begin} * s.cols + col + j;
          std::uint8_t* o = out.data() + e * esize;
          switch (format) {
            case OutputFormat::kBf16: {
              const std::uint16_t b = float_to_bf16_bits(v);
              std::memcpy(o, &b, 2);
              break;
            }
            case OutputFormat::kFp16: {
              const std::uint16_t b = float_to_fp16_bits(v);
              std::memcpy(o, &b, 2);
              break;
            }
            case OutputFormat::kFp32: std::memcpy(o, &v, 4); break;
            case OutputFormat::kFp8E4M3: *o = float_to_e4m3_bits(v); break;
            case OutputFormat::kFp8E5M2: *o = float_to_e5m2_bits(v); break;
            case OutputFormat::kInt8Rowwise: {
              int q = 2 * z[l][j] + c[l];
              if (gain.gain != 1.0f) {
                q = static_cast<int>(std::nearbyint(static_cast<float>(q) * gain.gain));
                q = std::clamp(q, -127, 127);
              }
              *o = static_cast<std::uint8_t>(static_cast<std::int8_t>(q));
              break;
            }
          }
        }
      }
      if (g_start == 0) break;
      g_start -= 32;
      n_valid = 32;
    }
    bool states_ok = true;
    for (int l = 0; l < rans::kLanes; ++l) states_ok = states_ok && x[l] == rans::kStateLow;
    TileFault fault = TileFault::kOk;
    if (underflow) {
      fault = TileFault::kUnderflow;
    } else if (p != static_cast<std::int64_t>(wb)) {
      fault = TileFault::kNotDrained;
    } else if (!states_ok) {
      fault = TileFault::kBadFinalState;
    }
    if (fault != TileFault::kOk && faults) faults->push_back({0, static_cast<std::uint32_t>(tile), fault});
  }
  return {};
}

}  // namespace epk::cuda
