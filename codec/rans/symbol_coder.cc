#include "codec/rans/symbol_coder.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <thread>

#include "codec/common/bytes.h"

namespace epk::rans::symbols {
namespace {

Error bad(std::string_view what, std::string_view field, const std::string& why) {
  return make_error(ErrorCode::kBadInput, std::string(what) + " " + std::string(field) + ": " + why);
}

Error corrupt(std::string_view what, std::uint64_t tile, const std::string& why) {
  return make_error(ErrorCode::kCorruptTile, std::string(what) + ": tile " + std::to_string(tile) + ": " + why);
}

// Checked geometry of a stored stream: the table as numbers, each tile's payload range.
struct Checked {
  std::vector<std::uint32_t> freq, cum;  // cum has 2^bits + 1 entries
  std::vector<std::uint64_t> begin;      // tiles + 1 payload offsets
  std::uint64_t tiles = 0;
};

Result<Checked> check(const StreamView& s, std::span<const std::uint8_t> out, std::string_view what) {
  if (s.bits < 1 || s.bits > 8) return bad(what, "bits", std::to_string(s.bits) + " outside 1..8");
  if (s.prob_bits < kMinProbBits || s.prob_bits > kMaxProbBits) {
    return bad(what, "prob_bits", std::to_string(s.prob_bits) + " outside " + std::to_string(kMinProbBits) + ".." +
                                      std::to_string(kMaxProbBits));
  }
  if (s.tile_symbols == 0) return bad(what, "tile_symbols", "0");
  if (out.size() != s.count) {
    return make_error(ErrorCode::kInvalidArgument, std::string(what) + ": output holds " +
                                                       std::to_string(out.size()) + " symbols, the stream " +
                                                       std::to_string(s.count));
  }
  const std::size_t alphabet = std::size_t{1} << s.bits;
  if (s.freqs.size() != 2 * alphabet) {
    return bad(what, "freqs", std::to_string(s.freqs.size()) + " bytes, expected " + std::to_string(2 * alphabet));
  }
  Checked c;
  c.freq.resize(alphabet);
  c.cum.assign(alphabet + 1, 0);
  for (std::size_t i = 0; i < alphabet; ++i) {
    c.freq[i] = load_le<std::uint16_t>(s.freqs.data() + 2 * i);
    c.cum[i + 1] = c.cum[i] + c.freq[i];  // at most 256 * 65535: no overflow
  }
  if (c.cum[alphabet] != (1u << s.prob_bits)) {
    return bad(what, "freqs", "sum " + std::to_string(c.cum[alphabet]) + ", expected 2^" +
                                  std::to_string(s.prob_bits));
  }
  c.tiles = s.count / s.tile_symbols + (s.count % s.tile_symbols != 0);
  if (s.tile_bytes.size() / 4 != c.tiles || s.tile_bytes.size() % 4 != 0) {
    return bad(what, "tiles", std::to_string(s.tile_bytes.size()) + " bytes, expected 4 * " +
                                  std::to_string(c.tiles));
  }
  c.begin.assign(c.tiles + 1, 0);
  for (std::uint64_t t = 0; t < c.tiles; ++t) {
    const std::uint32_t n = load_le<std::uint32_t>(s.tile_bytes.data() + 4 * t);
    if (n < 4) return bad(what, "tiles", "tile " + std::to_string(t) + " has " + std::to_string(n) + " bytes (< 4)");
    if (!checked_add(c.begin[t], std::uint64_t{n}, &c.begin[t + 1]) || c.begin[t + 1] > s.payload.size()) {
      return bad(what, "tiles", "tile " + std::to_string(t) + " runs past the payload");
    }
  }
  if (c.begin[c.tiles] != s.payload.size()) {
    return bad(what, "payload", std::to_string(s.payload.size() - c.begin[c.tiles]) + " bytes past the last tile");
  }
  return c;
}

// Decodes tile t; symbol_of(slot) gives the symbol whose range holds slot.
template <class SymbolOf>
Status decode_tile(const StreamView& s, const Checked& c, std::uint64_t t, std::span<std::uint8_t> out,
                   std::string_view what, SymbolOf&& symbol_of) {
  const std::uint8_t* p = s.payload.data() + c.begin[t];
  const std::uint8_t* end = s.payload.data() + c.begin[t + 1];
  std::uint32_t x = load_le<std::uint32_t>(p);
  p += 4;
  if (x < kStateLow || x >= (kStateLow << 8)) return corrupt(what, t, "initial state out of range");
  const std::uint32_t mask = (1u << s.prob_bits) - 1;
  const std::uint64_t first = t * s.tile_symbols;
  const std::uint64_t n = std::min<std::uint64_t>(s.tile_symbols, s.count - first);
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint32_t slot = x & mask;
    const std::uint32_t sym = symbol_of(slot);
    out[first + i] = static_cast<std::uint8_t>(sym);
    x = c.freq[sym] * (x >> s.prob_bits) + slot - c.cum[sym];
    while (x < kStateLow) {
      if (p == end) return corrupt(what, t, "stream truncated at symbol " + std::to_string(i));
      x = (x << 8) | *p++;
    }
  }
  if (p != end) return corrupt(what, t, std::to_string(end - p) + " bytes left after the last symbol");
  if (x != kStateLow) return corrupt(what, t, "final state " + std::to_string(x) + " is not the initial state");
  return {};
}

}  // namespace

Result<std::vector<std::uint16_t>> normalized_freqs(std::span<const std::uint8_t> symbols, int bits, int prob_bits) {
  if (bits < 1 || bits > 8 || prob_bits < kMinProbBits || prob_bits > kMaxProbBits) {
    return make_error(ErrorCode::kInvalidArgument, "symbol coder: bits or prob_bits out of range");
  }
  const std::size_t alphabet = std::size_t{1} << bits;
  std::vector<std::uint64_t> counts(alphabet, 0);
  for (std::uint8_t v : symbols) {
    if (v >= alphabet) {
      return make_error(ErrorCode::kInvalidArgument,
                        "symbol coder: symbol " + std::to_string(v) + " >= 2^" + std::to_string(bits));
    }
    ++counts[v];
  }
  const std::int64_t total_freq = std::int64_t{1} << prob_bits;
  std::vector<std::int64_t> f(alphabet, 0);
  if (symbols.empty()) {
    f[0] = total_freq;  // any valid table: nothing is coded with it
  } else {
    std::int64_t sum = 0;
    for (std::size_t i = 0; i < alphabet; ++i) {
      if (counts[i] == 0) continue;
      // Rounded share, at least 1 (2^prob_bits >= 256 >= the alphabet, so every symbol can keep one).
      const double share = static_cast<double>(counts[i]) * static_cast<double>(total_freq) /
                           static_cast<double>(symbols.size());
      f[i] = std::max<std::int64_t>(1, static_cast<std::int64_t>(share + 0.5));
      sum += f[i];
    }
    // Repair the sum one unit at a time where it costs least: take from (give to) the largest frequencies.
    while (sum != total_freq) {
      std::size_t best = alphabet;
      for (std::size_t i = 0; i < alphabet; ++i) {
        if (f[i] == 0 || (sum > total_freq && f[i] == 1)) continue;
        if (best == alphabet || f[i] > f[best]) best = i;
      }
      const std::int64_t step = sum > total_freq ? -1 : 1;
      f[best] += step;
      sum += step;
    }
  }
  std::vector<std::uint16_t> out(alphabet);
  for (std::size_t i = 0; i < alphabet; ++i) out[i] = static_cast<std::uint16_t>(f[i]);
  return out;
}

Result<Encoded> encode(std::span<const std::uint8_t> symbols, int bits, std::uint32_t tile_symbols, int prob_bits) {
  if (tile_symbols == 0) return make_error(ErrorCode::kInvalidArgument, "symbol coder: tile_symbols is 0");
  Encoded e;
  e.bits = bits;
  e.prob_bits = prob_bits;
  e.tile_symbols = tile_symbols;
  e.count = symbols.size();
  EPK_TRY_ASSIGN(e.freqs, normalized_freqs(symbols, bits, prob_bits));
  std::vector<std::uint32_t> cum(e.freqs.size() + 1, 0);
  for (std::size_t i = 0; i < e.freqs.size(); ++i) cum[i + 1] = cum[i] + e.freqs[i];
  std::vector<std::uint8_t> rev;  // one tile's bytes, written backwards
  for (std::uint64_t first = 0; first < e.count; first += tile_symbols) {
    const std::uint64_t n = std::min<std::uint64_t>(tile_symbols, e.count - first);
    rev.clear();
    std::uint32_t x = kStateLow;
    for (std::uint64_t i = n; i-- > 0;) {
      const std::uint8_t s = symbols[first + i];
      const std::uint32_t f = e.freqs[s];
      const std::uint32_t x_max = ((kStateLow >> prob_bits) << 8) * f;
      while (x >= x_max) {
        rev.push_back(static_cast<std::uint8_t>(x & 0xFF));
        x >>= 8;
      }
      x = ((x / f) << prob_bits) + (x % f) + cum[s];
    }
    for (int b = 0; b < 4; ++b) rev.push_back(static_cast<std::uint8_t>(x >> (8 * (3 - b))));  // reversed: LE u32
    if (rev.size() > UINT32_MAX) return make_error(ErrorCode::kInvalidArgument, "symbol coder: tile too large");
    e.tile_bytes.push_back(static_cast<std::uint32_t>(rev.size()));
    e.payload.insert(e.payload.end(), rev.rbegin(), rev.rend());
  }
  return e;
}

StreamView view_of(const Encoded& e) {
  StreamView v;
  v.bits = e.bits;
  v.prob_bits = e.prob_bits;
  v.tile_symbols = e.tile_symbols;
  v.count = e.count;
  // Host byte order is little-endian on every target of this project (codec/common/bytes.h relies on it too).
  v.freqs = {reinterpret_cast<const std::uint8_t*>(e.freqs.data()), e.freqs.size() * 2};
  v.tile_bytes = {reinterpret_cast<const std::uint8_t*>(e.tile_bytes.data()), e.tile_bytes.size() * 4};
  v.payload = e.payload;
  return v;
}

Status decode(const StreamView& s, std::span<std::uint8_t> out, std::string_view what, int threads) {
  EPK_TRY_ASSIGN(Checked c, check(s, out, what));
  std::vector<std::uint8_t> slot_symbol(std::size_t{1} << s.prob_bits);
  for (std::size_t sym = 0; sym + 1 < c.cum.size(); ++sym) {
    std::fill(slot_symbol.begin() + c.cum[sym], slot_symbol.begin() + c.cum[sym + 1], static_cast<std::uint8_t>(sym));
  }
  auto symbol_of = [&](std::uint32_t slot) { return std::uint32_t{slot_symbol[slot]}; };
  const std::uint64_t workers = std::clamp<std::uint64_t>(static_cast<std::uint64_t>(std::max(threads, 1)), 1,
                                                          std::max<std::uint64_t>(c.tiles, 1));
  if (workers == 1) {
    for (std::uint64_t t = 0; t < c.tiles; ++t) EPK_TRY(decode_tile(s, c, t, out, what, symbol_of));
    return {};
  }
  std::vector<Status> status(workers);
  std::vector<std::uint64_t> failed(workers, UINT64_MAX);
  std::vector<std::thread> pool;
  for (std::uint64_t w = 0; w < workers; ++w) {
    pool.emplace_back([&, w] {
      for (std::uint64_t t = w; t < c.tiles; t += workers) {
        status[w] = decode_tile(s, c, t, out, what, symbol_of);
        if (!status[w]) {
          failed[w] = t;
          return;
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  // The first failing tile in tile order is the one reported, as the serial decode would.
  const auto first = std::min_element(failed.begin(), failed.end());
  return *first == UINT64_MAX ? Status{} : status[static_cast<std::size_t>(first - failed.begin())];
}

Status decode_reference(const StreamView& s, std::span<std::uint8_t> out, std::string_view what) {
  EPK_TRY_ASSIGN(Checked c, check(s, out, what));
  auto symbol_of = [&](std::uint32_t slot) {
    std::uint32_t sym = 0;
    while (!(c.cum[sym] <= slot && slot < c.cum[sym + 1])) ++sym;  // the sum is 2^prob_bits: always found
    return sym;
  };
  for (std::uint64_t t = 0; t < c.tiles; ++t) EPK_TRY(decode_tile(s, c, t, out, what, symbol_of));
  return {};
}

}  // namespace epk::rans::symbols
