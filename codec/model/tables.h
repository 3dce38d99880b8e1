// The coset-conditioned probability model: 17 tables (table 0 the coset, table 1 + 2*field + c field 0..7 under coset
// c), each offset by its smallest symbol, normalised to 2^prob_bits exactly as the reference package does, and the
// stored-size estimate the scale search uses instead of encoding.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "codec/common/result.h"

namespace epk::model {

inline constexpr int kTables = 17;
inline constexpr int kMinProbBits = 9;
inline constexpr int kMaxProbBits = 15;
inline constexpr int table_of(int field, int coset) { return 1 + 2 * field + coset; }

// Symbol counts of one table. counts[i] counts the value sym_min + i; alphabet = counts.size() = max - min + 1
// (values inside the range that never occur count 0). An empty table has no counts and sym_min 0.
struct TableCounts {
  std::int32_t sym_min = 0;
  std::vector<std::uint64_t> counts;
  std::uint64_t total = 0;

  std::uint32_t alphabet() const { return std::uint32_t(counts.size()); }
};
using FieldCounts = std::array<TableCounts, kTables>;

// Counts of n vectors (coset[n], fields[8n]).
FieldCounts count_fields(const std::uint8_t* coset, const std::int32_t* fields, std::size_t n);
// Adds b's counts to a (the ranges grow to cover both).
void merge_counts(FieldCounts& a, const FieldCounts& b);
// The largest alphabet over all tables.
std::uint32_t max_alphabet(const FieldCounts& counts);

// The reference's normalisation to table_size = 2^pb: floor(count * (M / total)), at least 1 for every seen symbol;
// a shortfall goes +1 at a time to the largest residual (ties: lower symbol), an excess is taken from entries above 1
// with the smallest residual first. Errors on an empty table, an alphabet above M, or an excess that cannot be taken.
Result<std::vector<std::uint16_t>> normalize_frequencies(std::span<const std::uint64_t> counts, std::uint32_t table_size);

// Defaults of the reference: prob bits 11 up to 7 bpp, else 12; tile symbols 32768 up to 2 bpp, 16384 up to 4,
// 8192 up to 7, else 4096 (the vectors per tile they give: rans::vectors_per_tile, codec/rans/stream.h).
int initial_prob_bits(double target_bpp);
std::uint32_t default_tile_symbols(double target_bpp);

// How the frequency tables are stored: 2 bytes an entry (the reference profile), or each entry's frequency + 1 in an
// Elias gamma code (the native profile, codec/rans/native_format.h; its two bound codes a table are left out).
enum class TableCost : std::uint8_t { kTwoBytesAnEntry, kGammaCoded };

// Coded bytes without encoding: the cross-entropy of the counts under their normalised tables, less the bits the
// final states hold (tiles * 32 * 16), rounded up to 16-bit words; plus states, offsets and frequency tables.
// A table whose alphabet exceeds 2^pb is priced at pb bits a symbol. Tiles follow the coset count.
double estimate_coded_bytes(const FieldCounts& counts, int prob_bits, std::uint32_t tile_symbols,
                            TableCost table_cost = TableCost::kTwoBytesAnEntry);
// The whole stored tensor as the reference's eager search prices it: coded bytes + 4 per row + a fixed 856 for layout,
// stream metadata and header.
double estimate_stored_bytes(const FieldCounts& counts, std::uint64_t rows, int prob_bits, std::uint32_t tile_symbols);

}  // namespace epk::model
