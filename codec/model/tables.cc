#include "codec/model/tables.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <queue>
#include <string>
#include <utility>

#include "codec/lattice/e8.h"
#include "codec/rans/stream.h"

namespace epk::model {

namespace {

// Fixed terms of the reference's eager size model (MODEL_LAYOUT_BYTES, MODEL_STREAM_META_BYTES, slack).
constexpr double kFixedModelBytes = 64.0 + 408.0 + 384.0;
constexpr int kLanes = 32;

void add_value(TableCounts& t, std::int32_t value, std::uint64_t n) {
  if (t.counts.empty()) {
    t.sym_min = value;
    t.counts.assign(1, 0);
  } else if (value < t.sym_min) {
    const std::size_t grow = std::size_t(std::int64_t(t.sym_min) - value);
    t.counts.insert(t.counts.begin(), grow, 0);
    t.sym_min = value;
  } else if (std::int64_t(value) - t.sym_min >= std::int64_t(t.counts.size())) {
    t.counts.resize(std::size_t(std::int64_t(value) - t.sym_min + 1), 0);
  }
  t.counts[std::size_t(std::int64_t(value) - t.sym_min)] += n;
  t.total += n;
}

}  // namespace

FieldCounts count_fields(const std::uint8_t* coset, const std::int32_t* fields, std::size_t n) {
  FieldCounts out;
  if (n == 0) return out;
  // Ranges first, so each histogram is sized once.
  std::int32_t lo[kTables];
  std::int32_t hi[kTables];
  std::uint64_t seen[kTables] = {};
  for (int t = 0; t < kTables; ++t) {
    lo[t] = std::numeric_limits<std::int32_t>::max();
    hi[t] = std::numeric_limits<std::int32_t>::min();
  }
  for (std::size_t v = 0; v < n; ++v) {
    const int c = coset[v];
    const std::int32_t* f = fields + v * lattice::kFields;
    for (int k = 0; k < lattice::kFields; ++k) {
      const int t = table_of(k, c);
      lo[t] = std::min(lo[t], f[k]);
      hi[t] = std::max(hi[t], f[k]);
    }
    seen[c] += 1;
  }
  out[0].sym_min = 0;
  out[0].counts.assign(seen[1] ? 2 : 1, 0);
  out[0].counts[0] = seen[0];
  if (seen[1]) out[0].counts[1] = seen[1];
  out[0].total = n;
  // The coset table keeps sym_min 0 even when only coset 1 occurs: the reference never offsets it.
  for (int t = 1; t < kTables; ++t) {
    if (lo[t] > hi[t]) continue;
    out[t].sym_min = lo[t];
    out[t].counts.assign(std::size_t(std::int64_t(hi[t]) - lo[t] + 1), 0);
  }
  for (std::size_t v = 0; v < n; ++v) {
    const int c = coset[v];
    const std::int32_t* f = fields + v * lattice::kFields;
    for (int k = 0; k < lattice::kFields; ++k) {
      TableCounts& t = out[table_of(k, c)];
      t.counts[std::size_t(std::int64_t(f[k]) - t.sym_min)] += 1;
    }
  }
  for (int t = 1; t < kTables; ++t) out[t].total = seen[(t - 1) & 1];
  return out;
}

void merge_counts(FieldCounts& a, const FieldCounts& b) {
  for (int t = 0; t < kTables; ++t) {
    const TableCounts& src = b[t];
    if (src.counts.empty()) continue;
    if (t == 0 && a[0].counts.empty()) {
      a[0] = src;
      continue;
    }
    // Extend a's range to cover src's ends, then add.
    add_value(a[t], src.sym_min, 0);
    add_value(a[t], src.sym_min + std::int32_t(src.counts.size()) - 1, 0);
    for (std::size_t i = 0; i < src.counts.size(); ++i) {
      a[t].counts[std::size_t(std::int64_t(src.sym_min) + std::int64_t(i) - a[t].sym_min)] += src.counts[i];
    }
    a[t].total += src.total;
  }
}

std::uint32_t max_alphabet(const FieldCounts& counts) {
  std::uint32_t m = 0;
  for (const TableCounts& t : counts) m = std::max(m, t.alphabet());
  return m;
}

namespace {

// What normalize_into keeps between calls on one thread, so that the rate search's many estimates allocate nothing.
struct NormalizeScratch {
  std::vector<double> target;
  std::vector<std::int64_t> freq;
  std::vector<std::pair<double, std::size_t>> keys;
};

// normalize_frequencies into out[0, counts.size()).
Status normalize_into(std::span<const std::uint64_t> counts, std::uint32_t table_size, NormalizeScratch& s,
                      std::uint16_t* out) {
  std::uint64_t total = 0;
  for (std::uint64_t c : counts) total += c;
  if (counts.empty() || total == 0) {
    return make_error(ErrorCode::kInvalidArgument, "normalize_frequencies: empty symbol stream");
  }
  if (counts.size() > table_size) {
    return make_error(ErrorCode::kInvalidArgument, "normalize_frequencies: alphabet " + std::to_string(counts.size()) +
                                                       " exceeds table size " + std::to_string(table_size));
  }
  const std::size_t n = counts.size();
  const double ratio = double(table_size) / double(total);
  std::vector<double>& target = s.target;
  std::vector<std::int64_t>& freq = s.freq;
  target.resize(n);
  freq.resize(n);
  std::int64_t sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    target[i] = double(counts[i]) * ratio;
    freq[i] = std::int64_t(std::floor(target[i]));
    if (counts[i] != 0 && freq[i] < 1) freq[i] = 1;
    sum += freq[i];
  }
  const std::int64_t difference = std::int64_t(table_size) - sum;
  // The reference's rule is a queue of (key, symbol), smallest first, ties to the lower symbol: a shortfall takes the
  // head, adds 1 to its frequency and puts it back with key + 1; an excess takes 1 from the head and puts it back
  // with key + 1 while its frequency stays above 1.
  using Item = std::pair<double, std::size_t>;
  std::vector<Item>& keys = s.keys;
  keys.clear();
  if (difference > 0) {
    std::size_t non_positive = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (counts[i] == 0) continue;
      keys.emplace_back(-(target[i] - double(freq[i])), i);
      non_positive += keys.back().first <= 0.0;
    }
    if (std::uint64_t(difference) <= non_positive) {
      // The queue hands out keys in (key, symbol) order, and a key it puts back is k + 1 > 0 for a k in (-1, 0] (a
      // symbol floored, its key minus its fraction), as is the first key 1 - t of a symbol raised to 1. So while
      // there are as many keys <= 0 as steps, it hands out the smallest `difference` first keys, once each: a
      // selection instead of the queue, with the same result. The fractions sum to less than the number of symbols
      // floored, so this is the rule; the queue stays for what rounding may leave otherwise.
      std::nth_element(keys.begin(), keys.begin() + (difference - 1), keys.end());
      for (std::int64_t j = 0; j < difference; ++j) freq[keys[std::size_t(j)].second] += 1;
    } else {
      std::priority_queue<Item, std::vector<Item>, std::greater<Item>> queue(std::greater<Item>(), std::move(keys));
      for (std::int64_t step = 0; step < difference; ++step) {
        const Item top = queue.top();
        queue.pop();
        freq[top.second] += 1;
        queue.emplace(top.first + 1.0, top.second);
      }
      keys = std::vector<Item>();
    }
  } else if (difference < 0) {
    std::priority_queue<Item, std::vector<Item>, std::greater<Item>> queue;
    for (std::size_t i = 0; i < n; ++i) {
      if (counts[i] != 0 && freq[i] > 1) queue.emplace(target[i] - double(freq[i]), i);
    }
    for (std::int64_t step = 0; step < -difference; ++step) {
      if (queue.empty()) return make_error(ErrorCode::kInvalidArgument, "normalize_frequencies: cannot remove excess");
      const Item top = queue.top();
      queue.pop();
      freq[top.second] -= 1;
      if (freq[top.second] > 1) queue.emplace(top.first + 1.0, top.second);
    }
  }
  for (std::size_t i = 0; i < n; ++i) out[i] = std::uint16_t(freq[i]);
  return {};
}

// std::log2 of 0 .. 2^kMaxProbBits, computed once with std::log2 itself (so every value is the one it returns).
const std::vector<double>& log2_table() {
  static const std::vector<double> table = [] {
    std::vector<double> t((std::size_t{1} << kMaxProbBits) + 1);
    for (std::size_t i = 0; i < t.size(); ++i) t[i] = std::log2(double(i));
    return t;
  }();
  return table;
}

}  // namespace

Result<std::vector<std::uint16_t>> normalize_frequencies(std::span<const std::uint64_t> counts,
                                                         std::uint32_t table_size) {
  NormalizeScratch scratch;
  std::vector<std::uint16_t> out(counts.size());
  EPK_TRY(normalize_into(counts, table_size, scratch, out.data()));
  return out;
}

int initial_prob_bits(double target_bpp) { return target_bpp <= 7.0 ? 11 : 12; }

std::uint32_t default_tile_symbols(double target_bpp) {
  if (target_bpp <= 2.0) return 32768;
  if (target_bpp <= 4.0) return 16384;
  if (target_bpp <= 7.0) return 8192;
  return 4096;
}

double estimate_coded_bytes(const FieldCounts& counts, int prob_bits, std::uint32_t tile_symbols,
                            TableCost table_cost) {
  const std::uint32_t table_size = 1u << prob_bits;
  // The rate search estimates every step's counts: nothing allocated after a thread's first call.
  thread_local NormalizeScratch scratch;
  thread_local std::vector<std::uint16_t> freq;
  const std::vector<double>& log2_of = log2_table();
  double bits = 0.0;
  double overflow_bits = 0.0;
  double frequency_bytes = 0.0;
  for (const TableCounts& t : counts) {
    if (t.total == 0) continue;
    if (t.alphabet() > table_size) {
      overflow_bits += double(t.total) * prob_bits;
      continue;
    }
    freq.resize(t.counts.size());
    if (!normalize_into(t.counts, table_size, scratch, freq.data())) {
      overflow_bits += double(t.total) * prob_bits;
      continue;
    }
    for (std::size_t i = 0; i < t.counts.size(); ++i) {
      if (table_cost == TableCost::kGammaCoded) frequency_bytes += double(2 * std::bit_width(freq[i] + 1u) - 1) / 8.0;
      if (t.counts[i] == 0) continue;
      const double lg = freq[i] < log2_of.size() ? log2_of[freq[i]] : std::log2(double(freq[i]));
      bits += double(t.counts[i]) * (double(prob_bits) - lg);
    }
    if (table_cost == TableCost::kTwoBytesAnEntry) frequency_bytes += double(t.alphabet()) * 2.0;
  }
  const std::uint64_t tiles = rans::tiles_for_vectors(counts[0].total, tile_symbols);
  const double residual_bits = double(tiles * kLanes * 16);
  const double payload_words = std::ceil(std::max(0.0, bits - residual_bits) / 16.0);
  return payload_words * 2.0 + double(tiles * kLanes * 4) + double((tiles + 1) * 4) + double(frequency_bytes) +
         overflow_bits / 8.0;
}

double estimate_stored_bytes(const FieldCounts& counts, std::uint64_t rows, int prob_bits,
                             std::uint32_t tile_symbols) {
  return estimate_coded_bytes(counts, prob_bits, tile_symbols) + double(rows) * 4.0 + kFixedModelBytes;
}

}  // namespace epk::model
