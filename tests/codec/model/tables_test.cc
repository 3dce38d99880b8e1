#include "codec/model/tables.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "codec/lattice/quantize.h"
#include "codec/rans/stream.h"
#include "tests/codec/testing/vector_file.h"

namespace epk::model {
namespace {

epk::testing::VectorFile units() {
  return epk::testing::read_vector_file(std::string(EPK_SOURCE_DIR) +
                                        "/tests/data/entropack_units/normalize.safetensors");
}

TEST(Normalize, MatchesReferenceOnEveryCase) {
  const auto file = units();
  ASSERT_TRUE(file.ok) << file.error;
  int cases = 0;
  for (int k = 0; file.has("counts." + std::to_string(k)); ++k, ++cases) {
    const auto counts64 = file.at("counts." + std::to_string(k)).as<std::int64_t>();
    const auto want = file.at("freq." + std::to_string(k)).as<std::int64_t>();
    const auto table_size = file.at("table_size." + std::to_string(k)).as<std::int64_t>()[0];
    std::vector<std::uint64_t> counts(counts64.begin(), counts64.end());
    auto got = normalize_frequencies(counts, std::uint32_t(table_size));
    ASSERT_TRUE(got.has_value()) << got.error().to_string();
    ASSERT_EQ(got->size(), want.size()) << "case " << k;
    for (std::size_t i = 0; i < want.size(); ++i) ASSERT_EQ((*got)[i], want[i]) << "case " << k << " symbol " << i;
  }
  EXPECT_GE(cases, 10);
}

TEST(Normalize, SumsToTableSizeAndKeepsSeenSymbols) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const std::size_t n = 1 + rng() % 600;
    std::vector<std::uint64_t> counts(n);
    for (auto& c : counts) c = (rng() % 4 == 0) ? 0 : rng() % 100000;
    counts[rng() % n] = 1;
    const std::uint32_t m = 1u << (10 + trial % 6);
    if (n > m) continue;
    auto f = normalize_frequencies(counts, m);
    ASSERT_TRUE(f.has_value());
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < n; ++i) {
      sum += (*f)[i];
      ASSERT_EQ((*f)[i] == 0, counts[i] == 0) << i;
    }
    ASSERT_EQ(sum, m);
  }
}

TEST(Normalize, RefusesEmptyAndOversizedAlphabets) {
  EXPECT_FALSE(normalize_frequencies(std::vector<std::uint64_t>{}, 2048).has_value());
  EXPECT_FALSE(normalize_frequencies(std::vector<std::uint64_t>{0, 0}, 2048).has_value());
  EXPECT_FALSE(normalize_frequencies(std::vector<std::uint64_t>(513, 1), 512).has_value());
}

TEST(Counts, TablesAreConditionedOnTheCoset) {
  // two vectors: coset 0 with fields 0..7, coset 1 with fields -1..-8
  std::vector<std::uint8_t> c = {0, 1};
  std::vector<std::int32_t> f(16);
  for (int i = 0; i < 8; ++i) {
    f[i] = i;
    f[8 + i] = -1 - i;
  }
  const FieldCounts counts = count_fields(c.data(), f.data(), 2);
  EXPECT_EQ(counts[0].alphabet(), 2u);
  EXPECT_EQ(counts[0].total, 2u);
  for (int field = 0; field < 8; ++field) {
    EXPECT_EQ(counts[std::size_t(table_of(field, 0))].sym_min, field);
    EXPECT_EQ(counts[std::size_t(table_of(field, 1))].sym_min, -1 - field);
    EXPECT_EQ(counts[std::size_t(table_of(field, 0))].total, 1u);
  }
}

TEST(Counts, MergeEqualsCountingTheWhole) {
  std::mt19937 rng(9);
  const std::size_t n = 999;
  std::vector<std::uint8_t> c(n);
  std::vector<std::int32_t> f(n * 8);
  for (std::size_t v = 0; v < n; ++v) {
    c[v] = std::uint8_t(rng() & 1);
    for (int k = 0; k < 8; ++k) f[v * 8 + k] = int(rng() % 41) - 20 + (v < 300 ? 30 : 0);
  }
  const FieldCounts whole = count_fields(c.data(), f.data(), n);
  FieldCounts parts = count_fields(c.data(), f.data(), 300);
  merge_counts(parts, count_fields(c.data() + 300, f.data() + 300 * 8, n - 300));
  for (int t = 0; t < kTables; ++t) {
    EXPECT_EQ(parts[std::size_t(t)].sym_min, whole[std::size_t(t)].sym_min) << t;
    EXPECT_EQ(parts[std::size_t(t)].counts, whole[std::size_t(t)].counts) << t;
    EXPECT_EQ(parts[std::size_t(t)].total, whole[std::size_t(t)].total) << t;
  }
}

TEST(Estimate, MatchesReferenceSizeModel) {
  const auto file = units();
  ASSERT_TRUE(file.ok) << file.error;
  const auto c = file.at("est.c").as<std::uint8_t>();
  const auto f16 = file.at("est.fields").as<std::int16_t>();
  const auto want = file.at("est.bytes").as<double>();
  std::vector<std::int32_t> f(f16.begin(), f16.end());
  const FieldCounts counts = count_fields(c.data(), f.data(), c.size());
  const int pbs[3] = {11, 12, 9};
  const std::uint32_t tiles[3] = {16384, 4096, 32768};
  for (int i = 0; i < 3; ++i) {
    const double got = estimate_stored_bytes(counts, 96, pbs[i], tiles[i]);
    // The reference sums cross-entropy pairwise (numpy); the payload is rounded up to words, so allow one word.
    EXPECT_NEAR(got, want[std::size_t(i)], 2.0) << "pb " << pbs[i];
  }
}

TEST(Defaults, ProbBitsAndTileSizesFollowTheTarget) {
  EXPECT_EQ(initial_prob_bits(4.0), 11);
  EXPECT_EQ(initial_prob_bits(7.0), 11);
  EXPECT_EQ(initial_prob_bits(7.01), 12);
  EXPECT_EQ(default_tile_symbols(2.0), 32768u);
  EXPECT_EQ(default_tile_symbols(3.0), 16384u);
  EXPECT_EQ(default_tile_symbols(6.5), 8192u);
  EXPECT_EQ(default_tile_symbols(8.0), 4096u);
  EXPECT_EQ(rans::vectors_per_tile(16384), 1820u);
  EXPECT_EQ(rans::vectors_per_tile(100), 32u);
  EXPECT_EQ(rans::tiles_for_vectors(0, 16384), 1u);
  EXPECT_EQ(rans::tiles_for_vectors(1820, 16384), 1u);
  EXPECT_EQ(rans::tiles_for_vectors(1821, 16384), 2u);
}

}  // namespace
}  // namespace epk::model
