#include "codec/rans/encoder.h"

#include <string>
#include <utility>

#include "codec/common/parallel.h"
#include "codec/model/tables.h"

namespace epk::rans {

namespace {

struct CodingTable {
  std::vector<std::uint32_t> freq;
  std::vector<std::uint32_t> cdf;
  std::int32_t sym_min = 0;
};

// Codes one tile's vectors [begin, end) into words; the final states go to final_states[32].
void encode_tile(const lattice::QuantizedFields& q, std::size_t begin, std::size_t end,
                 const std::vector<CodingTable>& tables, std::uint32_t prob_bits, std::vector<std::uint16_t>& words,
                 std::uint32_t* final_states) {
  std::uint32_t x[kLanes];
  for (std::uint32_t& s : x) s = kStateLow;
  const int check_shift = 31 - int(prob_bits);
  auto put = [&](int lane, const CodingTable& t, std::uint32_t sym) {
    const std::uint32_t f = t.freq[sym];
    std::uint32_t s = x[lane];
    if (s >= (f << check_shift)) {
      words.push_back(std::uint16_t(s & 0xffffu));
      s >>= 16;
    }
    x[lane] = ((s / f) << prob_bits) + (s % f) + t.cdf[sym];
  };
  // Groups of 32 vectors in order, each coded fields 7..0 then the coset, lanes ascending within a step: the
  // decoder, reading backwards, meets the last (partial) group first and each vector's coset before its fields.
  for (std::size_t base = begin; base < end; base += kLanes) {
    const int limit = int(std::min<std::size_t>(kLanes, end - base));
    for (int field = lattice::kFields - 1; field >= 0; --field) {
      for (int lane = 0; lane < limit; ++lane) {
        const std::size_t v = base + std::size_t(lane);
        const CodingTable& t = tables[std::size_t(model::table_of(field, q.coset[v]))];
        put(lane, t, std::uint32_t(q.fields[v * lattice::kFields + std::size_t(field)] - t.sym_min));
      }
    }
    for (int lane = 0; lane < limit; ++lane) put(lane, tables[0], q.coset[base + std::size_t(lane)]);
  }
  for (int lane = 0; lane < kLanes; ++lane) final_states[lane] = x[lane];
}

}  // namespace

Status build_tables(const model::FieldCounts& counts, std::uint32_t prob_bits, EncodedTensor& out) {
  const std::uint32_t table_size = 1u << prob_bits;
  out.tables.assign(model::kTables, TableMeta{});
  out.freq_tables.clear();
  for (int t = 0; t < model::kTables; ++t) {
    const model::TableCounts& tc = counts[std::size_t(t)];
    TableMeta& meta = out.tables[std::size_t(t)];
    meta.n_symbols = std::int32_t(tc.total);
    meta.sym_min = tc.total ? tc.sym_min : 0;
    meta.freq_offset = std::int32_t(out.freq_tables.size());
    meta.alphabet = tc.total ? std::int32_t(tc.alphabet()) : 0;
    if (tc.total == 0) continue;
    auto freq = model::normalize_frequencies(tc.counts, table_size);
    if (!freq) {
      return make_error(ErrorCode::kInvalidArgument, "encode_fields: table " + std::to_string(t) + ": " +
                                                         freq.error().message);
    }
    out.freq_tables.insert(out.freq_tables.end(), freq->begin(), freq->end());
  }
  return {};
}

Result<EncodedTensor> encoded_geometry(const EncodeGeometry& g) {
  if (g.rows == 0 || g.cols == 0) return make_error(ErrorCode::kInvalidArgument, "encode_fields: empty tensor");
  if (g.prob_bits < std::uint32_t(model::kMinProbBits) || g.prob_bits > std::uint32_t(model::kMaxProbBits)) {
    return make_error(ErrorCode::kInvalidArgument, "encode_fields: prob_bits " + std::to_string(g.prob_bits));
  }
  if (g.tile_symbols == 0) return make_error(ErrorCode::kInvalidArgument, "encode_fields: tile_symbols 0");
  EncodedTensor out;
  out.rows = g.rows;
  out.cols = g.cols;
  out.padded_cols = (g.cols + 7) / 8 * 8;
  out.prob_bits = g.prob_bits;
  out.tile_symbols = g.tile_symbols;
  out.dtype = g.dtype;
  return out;
}

Result<EncodedTensor> encode_fields(const lattice::QuantizedFields& q, std::vector<float> scales,
                                    const EncodeGeometry& g, int threads) {
  EPK_TRY_ASSIGN(EncodedTensor out, encoded_geometry(g));
  const std::size_t vectors = std::size_t(g.rows) * (out.padded_cols / 8);
  if (q.vectors() != vectors || q.fields.size() != vectors * lattice::kFields) {
    return make_error(ErrorCode::kInvalidArgument, "encode_fields: " + std::to_string(q.vectors()) +
                                                       " vectors for a " + std::to_string(g.rows) + "x" +
                                                       std::to_string(g.cols) + " tensor");
  }
  if (scales.size() != g.rows) {
    return make_error(ErrorCode::kInvalidArgument, "encode_fields: " + std::to_string(scales.size()) +
                                                       " row scales for " + std::to_string(g.rows) + " rows");
  }
  for (std::uint8_t c : q.coset) {
    if (c > 1) return make_error(ErrorCode::kInvalidArgument, "encode_fields: coset value above 1");
  }
  out.scales = std::move(scales);

  const model::FieldCounts counts = model::count_fields(q.coset.data(), q.fields.data(), vectors);
  EPK_TRY(build_tables(counts, g.prob_bits, out));
  std::vector<CodingTable> tables(model::kTables);
  for (int t = 0; t < model::kTables; ++t) {
    const TableMeta& meta = out.tables[std::size_t(t)];
    if (meta.n_symbols == 0) continue;
    CodingTable& ct = tables[std::size_t(t)];
    ct.sym_min = meta.sym_min;
    ct.freq.assign(out.freq_tables.begin() + meta.freq_offset,
                   out.freq_tables.begin() + meta.freq_offset + meta.alphabet);
    ct.cdf.resize(ct.freq.size());
    std::uint32_t running = 0;
    for (std::size_t i = 0; i < ct.freq.size(); ++i) {
      ct.cdf[i] = running;
      running += ct.freq[i];
    }
  }

  const std::size_t tile_vectors = vectors_per_tile(g.tile_symbols);
  const std::size_t tiles = tiles_for_vectors(vectors, g.tile_symbols);
  std::vector<std::vector<std::uint16_t>> tile_words(tiles);
  out.states.resize(tiles * kLanes);
  parallel_for_blocks(tiles, 1, threads, [&](std::size_t t0, std::size_t t1) {
    for (std::size_t t = t0; t < t1; ++t) {
      const std::size_t begin = t * tile_vectors;
      const std::size_t end = std::min(vectors, begin + tile_vectors);
      tile_words[t].reserve((end - begin) * 3);
      encode_tile(q, begin, end, tables, g.prob_bits, tile_words[t], &out.states[t * kLanes]);
    }
  });
  out.offsets.resize(tiles + 1);
  std::uint64_t total = 0;
  for (std::size_t t = 0; t < tiles; ++t) total += tile_words[t].size();
  if (total > 0xffffffffull) {
    return make_error(ErrorCode::kInvalidArgument, "encode_fields: payload exceeds 2^32 words");
  }
  out.payload.reserve(std::size_t(total));
  out.offsets[0] = 0;
  for (std::size_t t = 0; t < tiles; ++t) {
    out.payload.insert(out.payload.end(), tile_words[t].begin(), tile_words[t].end());
    out.offsets[t + 1] = std::uint32_t(out.payload.size());
  }
  return out;
}

}  // namespace epk::rans
