// normalize_frequencies and estimate_coded_bytes against their plain forms, bit for bit: the reference's priority
// queue run step by step (normalize_by_queue below, the code normalize_frequencies had before its selection path)
// and the estimate with std::log2 called per symbol. Cases: random alphabets with and without symbols raised to 1,
// ties (equal counts), one symbol, alphabets as wide as the table, every table size 2^9..2^15, counts up to 2^40
// and totals where 1 - t rounds to 1.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <queue>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "codec/model/tables.h"
#include "codec/rans/stream.h"

namespace epk::model {
namespace {

// The reference's normalisation as a queue, one step at a time.
std::vector<std::uint16_t> normalize_by_queue(const std::vector<std::uint64_t>& counts, std::uint32_t table_size,
                                              bool* ok) {
  *ok = false;
  std::uint64_t total = 0;
  for (std::uint64_t c : counts) total += c;
  if (counts.empty() || total == 0 || counts.size() > table_size) return {};
  const std::size_t n = counts.size();
  const double ratio = double(table_size) / double(total);
  std::vector<double> target(n);
  std::vector<std::int64_t> freq(n);
  std::int64_t sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    target[i] = double(counts[i]) * ratio;
    freq[i] = std::int64_t(std::floor(target[i]));
    if (counts[i] != 0 && freq[i] < 1) freq[i] = 1;
    sum += freq[i];
  }
  const std::int64_t difference = std::int64_t(table_size) - sum;
  using Item = std::pair<double, std::size_t>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> queue;
  if (difference > 0) {
    for (std::size_t i = 0; i < n; ++i)
      if (counts[i] != 0) queue.emplace(-(target[i] - double(freq[i])), i);
    for (std::int64_t step = 0; step < difference; ++step) {
      const Item top = queue.top();
      queue.pop();
      freq[top.second] += 1;
      queue.emplace(top.first + 1.0, top.second);
    }
  } else if (difference < 0) {
    for (std::size_t i = 0; i < n; ++i)
      if (counts[i] != 0 && freq[i] > 1) queue.emplace(target[i] - double(freq[i]), i);
    for (std::int64_t step = 0; step < -difference; ++step) {
      if (queue.empty()) return {};
      const Item top = queue.top();
      queue.pop();
      freq[top.second] -= 1;
      if (freq[top.second] > 1) queue.emplace(top.first + 1.0, top.second);
    }
  }
  std::vector<std::uint16_t> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = std::uint16_t(freq[i]);
  *ok = true;
  return out;
}

void expect_same_normalisation(const std::vector<std::uint64_t>& counts, std::uint32_t table_size,
                               const std::string& what) {
  bool ok = false;
  const auto want = normalize_by_queue(counts, table_size, &ok);
  const auto got = normalize_frequencies(counts, table_size);
  ASSERT_EQ(got.has_value(), ok) << what;
  if (ok) {
    ASSERT_EQ(*got, want) << what;
  }
}

std::vector<std::uint64_t> random_counts(std::mt19937_64& rng, std::size_t n, int shape) {
  std::vector<std::uint64_t> c(n);
  for (std::size_t i = 0; i < n; ++i) {
    switch (shape) {
      case 0: c[i] = rng() % 100000; break;                           // flat-ish
      case 1: c[i] = (rng() % 3 == 0) ? 0 : 1 + rng() % 3; break;      // tiny counts: many raised to 1, ties
      case 2: c[i] = std::uint64_t(1e6 * std::exp(-double(i) / 4.0)); break;  // a two-sided tail's one side
      case 3: c[i] = 7; break;                                          // all tied
      default: c[i] = (rng() % 50 == 0) ? (std::uint64_t{1} << 40) : rng() % 5; break;  // one giant, rest tiny
    }
  }
  if (std::all_of(c.begin(), c.end(), [](std::uint64_t v) { return v == 0; })) c[0] = 1;
  return c;
}

TEST(NormalizeFast, EqualsTheQueueOnRandomAlphabets) {
  std::mt19937_64 rng(11);
  int cases = 0;
  for (int pb = kMinProbBits; pb <= kMaxProbBits; ++pb) {
    const std::uint32_t m = 1u << pb;
    for (int shape = 0; shape < 5; ++shape) {
      for (int trial = 0; trial < 40; ++trial) {
        const std::size_t n = 1 + std::size_t(rng() % std::min<std::uint64_t>(m, 3000));
        const auto counts = random_counts(rng, n, shape);
        expect_same_normalisation(counts, m,
                                  "pb " + std::to_string(pb) + " shape " + std::to_string(shape) + " n " +
                                      std::to_string(n));
        ++cases;
      }
    }
  }
  EXPECT_GT(cases, 1000);
}

TEST(NormalizeFast, EqualsTheQueueOnEdges) {
  for (std::uint32_t m : {512u, 2048u, 32768u}) {
    expect_same_normalisation({1}, m, "one symbol");
    expect_same_normalisation({0, 0, 5, 0}, m, "one seen among zeros");
    expect_same_normalisation(std::vector<std::uint64_t>(m, 1), m, "alphabet as wide as the table");
    expect_same_normalisation(std::vector<std::uint64_t>(m, 3), m, "as wide, all tied");
    std::vector<std::uint64_t> wide(m, 1);
    wide[0] = std::uint64_t{1} << 40;
    expect_same_normalisation(wide, m, "as wide, every other symbol raised to 1: an excess to take");
    // Totals so large that a raised symbol's key 1 - t rounds to 1.
    expect_same_normalisation({std::uint64_t{1} << 62, 1, 1, 3}, m, "1 - t rounds to 1");
    expect_same_normalisation({(std::uint64_t{1} << 62) + 12345, 1, 0, 1, 2}, m, "1 - t rounds to 1, ties");
    expect_same_normalisation(std::vector<std::uint64_t>(m + 1, 1), m, "wider than the table: refused");
    expect_same_normalisation({}, m, "empty: refused");
  }
}

// estimate_coded_bytes with std::log2 per symbol and the queue's frequencies.
double estimate_by_log2(const FieldCounts& counts, int prob_bits, std::uint32_t tile_symbols) {
  const std::uint32_t table_size = 1u << prob_bits;
  double bits = 0.0, overflow_bits = 0.0;
  std::uint64_t frequency_bytes = 0;
  for (const TableCounts& t : counts) {
    if (t.total == 0) continue;
    bool ok = false;
    const auto freq = t.alphabet() > table_size ? std::vector<std::uint16_t>{}
                                                : normalize_by_queue(t.counts, table_size, &ok);
    if (!ok) {
      overflow_bits += double(t.total) * prob_bits;
      continue;
    }
    for (std::size_t i = 0; i < t.counts.size(); ++i)
      if (t.counts[i] != 0) bits += double(t.counts[i]) * (double(prob_bits) - std::log2(double(freq[i])));
    frequency_bytes += std::uint64_t(t.alphabet()) * 2;
  }
  const std::uint64_t tiles = rans::tiles_for_vectors(counts[0].total, tile_symbols);
  const double residual_bits = double(tiles * 32 * 16);
  const double payload_words = std::ceil(std::max(0.0, bits - residual_bits) / 16.0);
  return payload_words * 2.0 + double(tiles * 32 * 4) + double((tiles + 1) * 4) + double(frequency_bytes) +
         overflow_bits / 8.0;
}

TEST(NormalizeFast, EstimateEqualsTheLog2PerSymbolForm) {
  std::mt19937_64 rng(12);
  for (int trial = 0; trial < 300; ++trial) {
    FieldCounts fc;
    for (int t = 0; t < kTables; ++t) {
      const std::size_t n = 1 + std::size_t(rng() % (trial % 3 == 0 ? 5000 : 400));  // some wider than 2^11
      fc[std::size_t(t)].sym_min = -int(n / 2);
      fc[std::size_t(t)].counts = random_counts(rng, n, int(rng() % 5));
      std::uint64_t total = 0;
      for (std::uint64_t c : fc[std::size_t(t)].counts) total += c;
      fc[std::size_t(t)].total = total;
    }
    const int pb = kMinProbBits + trial % (kMaxProbBits - kMinProbBits + 1);
    const std::uint32_t tile = 4096u << (trial % 4);
    const double want = estimate_by_log2(fc, pb, tile);
    const double got = estimate_coded_bytes(fc, pb, tile);
    ASSERT_EQ(std::memcmp(&want, &got, sizeof want), 0) << "trial " << trial << ": " << want << " vs " << got;
  }
}

}  // namespace
}  // namespace epk::model
