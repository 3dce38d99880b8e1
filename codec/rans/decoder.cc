#include "codec/rans/decoder.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "codec/common/float_convert.h"
#include "codec/common/parallel.h"
#include "codec/lattice/e8.h"

namespace epk::rans {

bool decode_output_supported(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kBF16:
    case DType::kF16:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
    case DType::kI8:
      return true;
    default:
      return false;
  }
}

namespace {

std::string prefix(std::string_view name) { return "tensor '" + std::string(name) + "': "; }

Error bad(std::string_view name, const std::string& what) {
  return make_error(ErrorCode::kBadInput, prefix(name) + what);
}

// One decode-table slot: the symbol's value (sym_min restored), its frequency (0: the table is empty) and
// slot - cdf, so x' = freq * (x >> pb) + bias.
struct Slot {
  std::int32_t value;
  std::uint16_t freq;
  std::uint16_t bias;
};

struct Luts {
  std::uint32_t prob_bits = 0;
  std::vector<Slot> slots;  // kTables * 2^pb
  const Slot* table(int t) const { return slots.data() + (std::size_t(t) << prob_bits); }
};

Luts build_luts(const LatticeRansStream& s) {
  Luts l;
  l.prob_bits = s.prob_bits;
  const std::uint32_t m = 1u << s.prob_bits;
  l.slots.assign(std::size_t(kTables) * m, Slot{0, 0, 0});
  for (int t = 0; t < kTables; ++t) {
    const TableMeta& meta = s.tables[std::size_t(t)];
    Slot* dst = l.slots.data() + std::size_t(t) * m;
    std::uint32_t running = 0;
    for (std::int32_t sym = 0; sym < meta.alphabet; ++sym) {
      const std::uint32_t f = s.freq_tables[std::size_t(meta.freq_offset + sym)];
      for (std::uint32_t k = 0; k < f; ++k) {
        dst[running + k] = Slot{meta.sym_min + sym, std::uint16_t(f), std::uint16_t(k)};
      }
      running += f;
    }
  }
  return l;
}

// Vectors of one tile's scratch (coset[n], fields[8n]): no tile holds more than the tensor's vectors, whatever
// tile_symbols says (a stream of a few vectors may declare up to 2^32 - 1 symbols per tile).
std::uint64_t tile_scratch_vectors(const LatticeRansStream& s) {
  return std::min<std::uint64_t>(vectors_per_tile(s.tile_symbols), s.vectors());
}

// Decodes tile t into coset[n] and fields[8n] (tile-local vector order), n <= tile_scratch_vectors(s).
TileFault decode_tile(const LatticeRansStream& s, const Luts& luts, std::uint32_t t, std::uint8_t* coset,
                      std::int32_t* fields) {
  const std::uint64_t tile_vectors = vectors_per_tile(s.tile_symbols);
  const std::uint64_t begin = std::uint64_t(t) * tile_vectors;
  const std::uint32_t count = std::uint32_t(std::min<std::uint64_t>(tile_vectors, s.vectors() - begin));
  const std::uint16_t* words = s.payload.data() + s.offsets[t];
  std::uint32_t ptr = s.offsets[t + 1] - s.offsets[t];
  const std::uint32_t pb = s.prob_bits;
  const std::uint32_t mask = (1u << pb) - 1;
  std::uint32_t x[kLanes];
  for (int lane = 0; lane < kLanes; ++lane) {
    x[lane] = s.states[std::size_t(t) * kLanes + std::size_t(lane)];
    if (x[lane] < kStateLow || x[lane] >= (1u << 31)) return TileFault::kBadInitialState;
  }
  // Lanes that need a word take them in ascending lane order from the words just below the pointer; walking the
  // lanes downwards and reading at --ptr gives each lane the same word.
  auto group = [&](std::uint32_t base, int n) -> TileFault {
    const Slot* t0 = luts.table(0);
    for (int lane = n - 1; lane >= 0; --lane) {
      std::uint32_t v = x[lane];
      const Slot e = t0[v & mask];
      v = std::uint32_t(e.freq) * (v >> pb) + e.bias;
      if (v < kStateLow) {
        if (ptr == 0) return TileFault::kTruncated;
        v = (v << 16) | words[--ptr];
      }
      x[lane] = v;
      coset[base + std::uint32_t(lane)] = std::uint8_t(e.value);
    }
    for (int field = 0; field < lattice::kFields; ++field) {
      for (int lane = n - 1; lane >= 0; --lane) {
        const std::uint32_t vec = base + std::uint32_t(lane);
        const Slot* tab = luts.table(1 + 2 * field + coset[vec]);
        std::uint32_t v = x[lane];
        const Slot e = tab[v & mask];
        if (e.freq == 0) return TileFault::kEmptyTable;
        v = std::uint32_t(e.freq) * (v >> pb) + e.bias;
        if (v < kStateLow) {
          if (ptr == 0) return TileFault::kTruncated;
          v = (v << 16) | words[--ptr];
        }
        x[lane] = v;
        fields[std::size_t(vec) * lattice::kFields + std::size_t(field)] = e.value;
      }
    }
    return TileFault::kOk;
  };
  const std::uint32_t rem = count % kLanes;
  std::uint32_t off = count - rem;
  if (rem) {
    if (TileFault f = group(off, int(rem)); f != TileFault::kOk) return f;
  }
  while (off > 0) {
    off -= kLanes;
    if (TileFault f = group(off, kLanes); f != TileFault::kOk) return f;
  }
  if (ptr != 0) return TileFault::kUnreadWords;
  for (std::uint32_t v : x) {
    if (v != kStateLow) return TileFault::kBadFinalState;
  }
  return TileFault::kOk;
}

std::size_t element_size(DType t) { return std::size_t(dtype_bits(t) / 8); }

// One output element from a reconstructed float32, saturated as the reference's snap_to_container.
template <DType T>
inline void store_one(float v, std::byte* dst, std::size_t i) {
  if constexpr (T == DType::kF32) {
    std::memcpy(dst + 4 * i, &v, 4);
  } else if constexpr (T == DType::kBF16) {
    const std::uint16_t b = bf16_from_float(std::clamp(v, -kBf16Max, kBf16Max));
    std::memcpy(dst + 2 * i, &b, 2);
  } else if constexpr (T == DType::kF16) {
    const std::uint16_t b = f16_from_float(std::clamp(v, -kF16Max, kF16Max));
    std::memcpy(dst + 2 * i, &b, 2);
  } else if constexpr (T == DType::kF8E4M3) {
    dst[i] = std::byte(f8e4m3_from_float(std::clamp(v, -kF8E4M3Max, kF8E4M3Max)));
  } else if constexpr (T == DType::kF8E5M2) {
    dst[i] = std::byte(f8e5m2_from_float(std::clamp(v, -kF8E5M2Max, kF8E5M2Max)));
  } else {
    static_assert(T == DType::kI8);
    dst[i] = std::byte(std::uint8_t(std::int8_t(std::clamp(std::nearbyint(v), -128.0f, 127.0f))));
  }
}

// Writes the decoded vectors [v0, v1) of a tile (tile-local arrays start at vector tb) into out.
template <DType T>
void reconstruct(const LatticeRansStream& s, const std::uint8_t* coset, const std::int32_t* fields, std::uint64_t tb,
                 std::uint64_t v0, std::uint64_t v1, std::uint32_t row_begin, std::byte* out) {
  constexpr std::size_t esize = std::size_t(T == DType::kF32 ? 4 : (T == DType::kBF16 || T == DType::kF16) ? 2 : 1);
  const std::uint64_t vpr = s.padded_cols / 8;
  for (std::uint64_t v = v0; v < v1; ++v) {
    const std::uint8_t c = coset[v - tb];
    const std::int32_t* f = &fields[(v - tb) * lattice::kFields];
    const std::uint64_t row = v / vpr;
    const std::uint64_t col = (v % vpr) * 8;
    const float scale = s.scales[row];
    const float half = 0.5f * float(c);
    const std::int32_t par = (f[0] ^ f[1] ^ f[2] ^ f[3] ^ f[4] ^ f[5] ^ f[6]) & 1;
    float vals[8];
    for (int k = 0; k < 7; ++k) vals[k] = (float(f[k]) + half) * scale;
    vals[7] = (float(2 * f[7] + par) + half) * scale;
    std::byte* dst = out + ((row - row_begin) * s.cols + col) * esize;
    if (col + 8 <= s.cols) {
      for (int k = 0; k < 8; ++k) store_one<T>(vals[k], dst, std::size_t(k));
    } else {
      const int n = int(s.cols - col);
      for (int k = 0; k < n; ++k) store_one<T>(vals[k], dst, std::size_t(k));
    }
  }
}

void reconstruct_any(DType t, const LatticeRansStream& s, const std::uint8_t* coset, const std::int32_t* fields,
                     std::uint64_t tb, std::uint64_t v0, std::uint64_t v1, std::uint32_t row_begin, std::byte* out) {
  switch (t) {
    case DType::kF32: return reconstruct<DType::kF32>(s, coset, fields, tb, v0, v1, row_begin, out);
    case DType::kBF16: return reconstruct<DType::kBF16>(s, coset, fields, tb, v0, v1, row_begin, out);
    case DType::kF16: return reconstruct<DType::kF16>(s, coset, fields, tb, v0, v1, row_begin, out);
    case DType::kF8E4M3: return reconstruct<DType::kF8E4M3>(s, coset, fields, tb, v0, v1, row_begin, out);
    case DType::kF8E5M2: return reconstruct<DType::kF8E5M2>(s, coset, fields, tb, v0, v1, row_begin, out);
    case DType::kI8: return reconstruct<DType::kI8>(s, coset, fields, tb, v0, v1, row_begin, out);
    default: return;
  }
}

}  // namespace

Status validate_stream(const LatticeRansStream& s, std::string_view name) {
  if (s.rows == 0 || s.cols == 0) return bad(name, "empty shape");
  if (s.padded_cols % 8 != 0 || s.padded_cols < s.cols || s.padded_cols - s.cols >= 8) {
    return bad(name, "layout columns " + std::to_string(s.padded_cols) + " do not match " + std::to_string(s.cols) +
                         " columns");
  }
  if (s.prob_bits < 9 || s.prob_bits > 15) return bad(name, "prob_bits " + std::to_string(s.prob_bits));
  if (s.tile_symbols == 0) return bad(name, "tile_symbols 0");
  const std::uint64_t vectors = s.vectors();
  const std::uint64_t tiles = tiles_for_vectors(vectors, s.tile_symbols);  // vectors >= 1 here
  if (s.offsets.size() != tiles + 1) {
    return bad(name, "offsets has " + std::to_string(s.offsets.size()) + " entries, expected " +
                         std::to_string(tiles + 1));
  }
  if (s.states.size() != tiles * kLanes) {
    return bad(name, "states has " + std::to_string(s.states.size()) + " entries, expected " +
                         std::to_string(tiles * kLanes));
  }
  if (s.offsets.front() != 0 || s.offsets.back() != s.payload.size()) {
    return bad(name, "offsets do not run from 0 to the payload size " + std::to_string(s.payload.size()));
  }
  for (std::size_t t = 0; t < tiles; ++t) {
    if (s.offsets[t + 1] < s.offsets[t]) return bad(name, "offsets decrease at tile " + std::to_string(t));
  }
  if (s.tables.size() != std::size_t(kTables)) {
    return bad(name, "stream_meta has " + std::to_string(s.tables.size()) + " rows, expected 17");
  }
  const std::int64_t table_size = std::int64_t(1) << s.prob_bits;
  std::int64_t running = 0;
  for (int t = 0; t < kTables; ++t) {
    const TableMeta& m = s.tables[std::size_t(t)];
    const std::string which = "stream_meta row " + std::to_string(t) + ": ";
    if (m.n_symbols < 0 || m.alphabet < 0 || m.freq_offset < 0) return bad(name, which + "negative field");
    if (m.freq_offset != running || std::int64_t(m.freq_offset) + m.alphabet > std::int64_t(s.freq_tables.size())) {
      return bad(name, which + "frequency range not contiguous");
    }
    if ((m.n_symbols == 0) != (m.alphabet == 0)) return bad(name, which + "empty table inconsistent");
    if (m.alphabet > table_size) return bad(name, which + "alphabet exceeds 2^prob_bits");
    // Decoders form 2 * (2 * z8 + parity) + coset in int32 (CPU and GPU alike): every symbol's magnitude stays within
    // kMaxSymbolMagnitude so that never overflows. Real tables are far inside it (an alphabet is at most 2^15 wide).
    const std::int64_t sym_max = std::int64_t(m.sym_min) + m.alphabet - 1;
    if (m.alphabet && (m.sym_min < -kMaxSymbolMagnitude || sym_max > kMaxSymbolMagnitude)) {
      return bad(name, which + "symbols [" + std::to_string(m.sym_min) + ", " + std::to_string(sym_max) +
                           "] outside [-2^28, 2^28]");
    }
    if (m.alphabet) {
      std::int64_t sum = 0;
      for (std::int32_t i = 0; i < m.alphabet; ++i) sum += s.freq_tables[std::size_t(m.freq_offset + i)];
      if (sum != table_size) {
        return bad(name, which + "frequencies sum to " + std::to_string(sum) + ", not " + std::to_string(table_size));
      }
    }
    running += m.alphabet;
  }
  if (running != std::int64_t(s.freq_tables.size())) return bad(name, "freq_tables has trailing entries");
  const TableMeta& c = s.tables[0];
  if (std::uint64_t(c.n_symbols) != vectors || c.sym_min != 0 || c.alphabet > 2) {
    return bad(name, "coset table metadata invalid");
  }
  const std::int64_t n0 = s.tables[1].n_symbols;
  const std::int64_t n1 = s.tables[2].n_symbols;
  if (std::uint64_t(n0 + n1) != vectors) return bad(name, "conditioned tables do not cover all vectors");
  for (int f = 0; f < 8; ++f) {
    if (s.tables[std::size_t(1 + 2 * f)].n_symbols != n0 || s.tables[std::size_t(2 + 2 * f)].n_symbols != n1) {
      return bad(name, "conditioned table counts disagree across fields");
    }
  }
  if (s.scales.size() != s.rows) {
    return bad(name, "scales has " + std::to_string(s.scales.size()) + " entries, expected " + std::to_string(s.rows));
  }
  for (std::size_t r = 0; r < s.scales.size(); ++r) {
    if (!std::isfinite(s.scales[r]) || !(s.scales[r] > 0.0f)) {
      return bad(name, "row scale " + std::to_string(r) + " not finite and positive");
    }
  }
  return {};
}

struct DecodePlan::Impl {
  LatticeRansStream s;
  std::string name;
  Luts luts;
};

DecodePlan::DecodePlan(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DecodePlan::DecodePlan(DecodePlan&&) noexcept = default;
DecodePlan& DecodePlan::operator=(DecodePlan&&) noexcept = default;
DecodePlan::~DecodePlan() = default;

const LatticeRansStream& DecodePlan::stream() const { return impl_->s; }

Result<DecodePlan> DecodePlan::create(const LatticeRansStream& s, std::string_view name) {
  EPK_TRY(validate_stream(s, name));
  auto impl = std::make_unique<Impl>();
  impl->s = s;
  impl->name = std::string(name);
  impl->luts = build_luts(s);
  return DecodePlan(std::move(impl));
}

namespace {

Status check_row_range(const LatticeRansStream& s, std::string_view name, std::uint32_t row_begin,
                       std::uint32_t row_end) {
  if (row_begin > row_end || row_end > s.rows) {
    return make_error(ErrorCode::kInvalidArgument, prefix(name) + "row range [" + std::to_string(row_begin) + ", " +
                                                       std::to_string(row_end) + ") outside " +
                                                       std::to_string(s.rows) + " rows");
  }
  return {};
}

Status check_size(std::string_view name, const char* what, std::size_t have, std::uint64_t need) {
  if (have != need) {
    return make_error(ErrorCode::kInvalidArgument, prefix(name) + what + " of " + std::to_string(have) +
                                                       " bytes, expected " + std::to_string(need));
  }
  return {};
}

// Decodes the tiles covering rows [row_begin, row_end) and hands every good tile's vectors within the range to
// write(coset, fields, tile_first_vector, v0, v1); reports the bad tiles.
template <typename Write>
Status decode_range(const LatticeRansStream& s, std::string_view name, const Luts& luts, std::uint32_t row_begin,
                    std::uint32_t row_end, int threads, std::vector<TileFaultRecord>* faults, Write&& write) {
  if (row_begin == row_end) return {};
  const std::uint64_t vpr = s.padded_cols / 8;
  const std::uint64_t tile_vectors = vectors_per_tile(s.tile_symbols);
  const std::uint64_t v0 = std::uint64_t(row_begin) * vpr;
  const std::uint64_t v1 = std::uint64_t(row_end) * vpr;
  const std::uint64_t t0 = v0 / tile_vectors;
  const std::uint64_t t1 = tiles_for_vectors(v1, s.tile_symbols);
  const std::uint64_t scratch = tile_scratch_vectors(s);
  std::vector<TileFault> status(t1 - t0, TileFault::kOk);
  parallel_for_blocks(t1 - t0, 4, threads, [&](std::size_t b0, std::size_t b1) {
    std::vector<std::uint8_t> coset(scratch);
    std::vector<std::int32_t> fields(scratch * lattice::kFields);
    for (std::size_t i = b0; i < b1; ++i) {
      const std::uint32_t t = std::uint32_t(t0 + i);
      const TileFault f = decode_tile(s, luts, t, coset.data(), fields.data());
      status[i] = f;
      if (f != TileFault::kOk) continue;
      const std::uint64_t tb = std::uint64_t(t) * tile_vectors;
      const std::uint64_t te = std::min(tb + tile_vectors, s.vectors());
      write(coset.data(), fields.data(), tb, std::max(tb, v0), std::min(te, v1));
    }
  });
  std::vector<TileFaultRecord> bad_tiles;
  for (std::size_t i = 0; i < status.size(); ++i) {
    if (status[i] != TileFault::kOk) {
      bad_tiles.push_back(TileFaultRecord{.tile = std::uint32_t(t0 + i), .fault = status[i]});
    }
  }
  if (bad_tiles.empty()) return {};
  std::string msg = prefix(name) + std::to_string(bad_tiles.size()) + " corrupt tile(s):";
  for (std::size_t i = 0; i < bad_tiles.size() && i < 8; ++i) {
    msg += " tile " + std::to_string(bad_tiles[i].tile) + " (";
    msg += tile_fault_name(bad_tiles[i].fault);
    msg += ")";
  }
  if (faults) faults->insert(faults->end(), bad_tiles.begin(), bad_tiles.end());
  return make_error(ErrorCode::kCorruptTile, msg);
}

// Rowwise values of the vectors [v0, v1) (see rowwise_gain in decoder.h).
void reconstruct_rowwise(const LatticeRansStream& s, RowwiseType type, const RowwiseGain& g, const std::uint8_t* coset,
                         const std::int32_t* fields, std::uint64_t tb, std::uint64_t v0, std::uint64_t v1,
                         std::uint32_t row_begin, std::byte* values, float* row_scales) {
  const std::uint64_t vpr = s.padded_cols / 8;
  for (std::uint64_t v = v0; v < v1; ++v) {
    const std::int32_t c = coset[v - tb];
    const std::int32_t* f = &fields[(v - tb) * lattice::kFields];
    const std::uint64_t row = v / vpr;
    const std::uint64_t col = (v % vpr) * 8;
    const std::int32_t par = (f[0] ^ f[1] ^ f[2] ^ f[3] ^ f[4] ^ f[5] ^ f[6]) & 1;
    std::int32_t twice[8];  // 2p = 2z + c
    for (int k = 0; k < 7; ++k) twice[k] = 2 * f[k] + c;
    twice[7] = 2 * (2 * f[7] + par) + c;
    std::byte* dst = values + (row - row_begin) * s.cols + col;
    const int n = col + 8 <= s.cols ? 8 : int(s.cols - col);
    for (int k = 0; k < n; ++k) {
      const float scaled = float(twice[k]) * g.gain;
      if (type == RowwiseType::kInt8) {
        const float q = g.gain == 1.0f ? float(twice[k]) : std::clamp(std::nearbyint(scaled), -127.0f, 127.0f);
        dst[k] = std::byte(std::uint8_t(std::int8_t(q)));
      } else {
        dst[k] = std::byte(f8e4m3_from_float(std::clamp(scaled, -kF8E4M3Max, kF8E4M3Max)));
      }
    }
    if (col == 0) row_scales[row - row_begin] = s.scales[row] * g.half_over_gain;
  }
}

}  // namespace

RowwiseGain rowwise_gain(const LatticeRansStream& s, RowwiseType type) {
  // Largest |2p| = |2z + c| any table allows; z8 = 2m + parity spans [2 m_min, 2 m_max + 1].
  RowwiseGain g;
  for (int field = 0; field < lattice::kFields; ++field) {
    for (int c = 0; c < 2; ++c) {
      const std::size_t t = 1 + 2 * std::size_t(field) + std::size_t(c);
      if (t >= s.tables.size() || s.tables[t].alphabet <= 0) continue;
      std::int64_t lo = s.tables[t].sym_min;
      std::int64_t hi = lo + s.tables[t].alphabet - 1;
      if (field == 7) {
        lo = 2 * lo;
        hi = 2 * hi + 1;
      }
      g.bound = std::max({g.bound, std::abs(2 * lo + c), std::abs(2 * hi + c)});
    }
  }
  const double limit = type == RowwiseType::kInt8 ? 127.0 : 448.0;
  if (double(g.bound) > limit) {
    g.gain = float(limit / double(g.bound));
    g.half_over_gain = float(0.5 / double(g.gain));
  }
  return g;
}

Status DecodePlan::decode_rows(DType out_type, std::span<std::byte> out, std::uint32_t row_begin,
                               std::uint32_t row_end, int threads, std::vector<TileFaultRecord>* faults) const {
  const LatticeRansStream& s = impl_->s;
  const std::string_view name = impl_->name;
  if (!decode_output_supported(out_type)) {
    return make_error(ErrorCode::kUnsupported, prefix(name) + "output dtype " + std::string(dtype_name(out_type)));
  }
  EPK_TRY(check_row_range(s, name, row_begin, row_end));
  EPK_TRY(check_size(name, "output buffer", out.size(),
                     std::uint64_t(row_end - row_begin) * s.cols * element_size(out_type)));
  return decode_range(s, name, impl_->luts, row_begin, row_end, threads, faults,
                      [&](const std::uint8_t* coset, const std::int32_t* fields, std::uint64_t tb, std::uint64_t v0,
                          std::uint64_t v1) {
                        reconstruct_any(out_type, s, coset, fields, tb, v0, v1, row_begin, out.data());
                      });
}

Status DecodePlan::decode_rowwise(RowwiseType type, std::span<std::byte> values, std::span<float> row_scales,
                                  std::uint32_t row_begin, std::uint32_t row_end, int threads,
                                  std::vector<TileFaultRecord>* faults) const {
  const LatticeRansStream& s = impl_->s;
  const std::string_view name = impl_->name;
  if (type != RowwiseType::kInt8 && type != RowwiseType::kF8E4M3) {
    return make_error(ErrorCode::kUnsupported, prefix(name) + "unknown rowwise type");
  }
  EPK_TRY(check_row_range(s, name, row_begin, row_end));
  EPK_TRY(check_size(name, "rowwise values", values.size(), std::uint64_t(row_end - row_begin) * s.cols));
  EPK_TRY(check_size(name, "rowwise row scales", row_scales.size_bytes(), std::uint64_t(row_end - row_begin) * 4));
  const RowwiseGain g = rowwise_gain(s, type);
  return decode_range(s, name, impl_->luts, row_begin, row_end, threads, faults,
                      [&](const std::uint8_t* coset, const std::int32_t* fields, std::uint64_t tb, std::uint64_t v0,
                          std::uint64_t v1) {
                        reconstruct_rowwise(s, type, g, coset, fields, tb, v0, v1, row_begin, values.data(),
                                            row_scales.data());
                      });
}

Status decode_rows(const LatticeRansStream& s, std::string_view name, DType out_type, std::span<std::byte> out,
                   std::uint32_t row_begin, std::uint32_t row_end, int threads, std::vector<TileFaultRecord>* faults) {
  if (!decode_output_supported(out_type)) {
    return make_error(ErrorCode::kUnsupported, prefix(name) + "output dtype " + std::string(dtype_name(out_type)));
  }
  EPK_TRY_ASSIGN(const DecodePlan plan, DecodePlan::create(s, name));
  return plan.decode_rows(out_type, out, row_begin, row_end, threads, faults);
}

Status decode_rowwise(const LatticeRansStream& s, std::string_view name, RowwiseType type, std::span<std::byte> values,
                      std::span<float> row_scales, std::uint32_t row_begin, std::uint32_t row_end, int threads,
                      std::vector<TileFaultRecord>* faults) {
  EPK_TRY_ASSIGN(const DecodePlan plan, DecodePlan::create(s, name));
  return plan.decode_rowwise(type, values, row_scales, row_begin, row_end, threads, faults);
}

Result<std::vector<TileFaultRecord>> check_tiles(const LatticeRansStream& s, std::string_view name, int threads) {
  EPK_TRY(validate_stream(s, name));
  const Luts luts = build_luts(s);
  const std::uint64_t scratch = tile_scratch_vectors(s);
  const std::uint32_t tiles = s.tiles();
  std::vector<TileFault> status(tiles, TileFault::kOk);
  parallel_for_blocks(tiles, 4, threads, [&](std::size_t b0, std::size_t b1) {
    std::vector<std::uint8_t> coset(scratch);
    std::vector<std::int32_t> fields(scratch * lattice::kFields);
    for (std::size_t t = b0; t < b1; ++t) status[t] = decode_tile(s, luts, std::uint32_t(t), coset.data(), fields.data());
  });
  std::vector<TileFaultRecord> out;
  for (std::uint32_t t = 0; t < tiles; ++t) {
    if (status[t] != TileFault::kOk) out.push_back(TileFaultRecord{.tile = t, .fault = status[t]});
  }
  return out;
}

Result<lattice::QuantizedFields> decode_fields(const LatticeRansStream& s, std::string_view name) {
  EPK_TRY(validate_stream(s, name));
  const Luts luts = build_luts(s);
  const std::uint64_t tile_vectors = vectors_per_tile(s.tile_symbols);
  lattice::QuantizedFields q;
  q.resize(s.vectors());
  for (std::uint32_t t = 0; t < s.tiles(); ++t) {
    const std::uint64_t tb = std::uint64_t(t) * tile_vectors;
    const TileFault f = decode_tile(s, luts, t, &q.coset[tb], &q.fields[tb * lattice::kFields]);
    if (f != TileFault::kOk) {
      return make_error(ErrorCode::kCorruptTile,
                        prefix(name) + "tile " + std::to_string(t) + " (" + std::string(tile_fault_name(f)) + ")");
    }
  }
  return q;
}

}  // namespace epk::rans
