#include "codec/layouts/intq_codes.h"

#include "codec/common/alloc.h"
#include "codec/layouts/pack_bits.h"

namespace epk::layouts::intq::detail {
namespace {

std::vector<std::uint8_t> words_to_bytes(const std::vector<std::uint32_t>& w) {
  std::vector<std::uint8_t> out(w.size() * 4);
  for (std::size_t i = 0; i < w.size(); ++i) store_le<std::uint32_t>(out.data() + 4 * i, w[i]);
  return out;
}

}  // namespace

Status add_packed(Encoded& e, std::string name, std::span<const std::uint8_t> values, int bits) {
  std::vector<std::uint32_t> words(packed_words(values.size(), bits));
  EPK_TRY(pack_bits(values, bits, words));
  add_buffer(e, std::move(name), words_to_bytes(words));
  return {};
}

void add_rans_codes(Encoded& e, json& params, rans::symbols::Encoded coded) {
  params["codes"] = "rans";
  params["code_prob_bits"] = coded.prob_bits;
  params["code_tile_symbols"] = coded.tile_symbols;
  std::vector<std::uint8_t> freqs(coded.freqs.size() * 2), tiles(coded.tile_bytes.size() * 4);
  for (std::size_t i = 0; i < coded.freqs.size(); ++i) {
    store_le<std::uint16_t>(freqs.data() + 2 * i, coded.freqs[i]);
  }
  for (std::size_t i = 0; i < coded.tile_bytes.size(); ++i) {
    store_le<std::uint32_t>(tiles.data() + 4 * i, coded.tile_bytes[i]);
  }
  add_buffer(e, "codes", std::move(coded.payload));
  add_buffer(e, "code_freqs", std::move(freqs));
  add_buffer(e, "code_tiles", std::move(tiles));
}

Status unpack_checked(const Where& w, std::string_view field, std::span<const std::uint8_t> bytes, std::size_t n,
                      int bits, std::vector<std::uint8_t>* out) {
  std::vector<std::uint32_t> words(bytes.size() / 4);
  for (std::size_t i = 0; i < words.size(); ++i) words[i] = load_le<std::uint32_t>(bytes.data() + 4 * i);
  const std::size_t used_bits = n * static_cast<std::size_t>(bits);
  if (used_bits % 32 != 0 && !words.empty() && (words.back() >> (used_bits % 32)) != 0) {
    return w.bad(std::string("buffers.") + std::string(field), "bits set past the last value");
  }
  out->assign(n, 0);
  auto st = unpack_bits(words, bits, *out);
  if (!st) return w.bad(std::string("buffers.") + std::string(field), st.error().message);
  return {};
}

Status decode_rans_codes(const Where& w, int bits, int prob_bits, std::uint32_t tile_symbols, std::uint64_t count,
                         std::vector<std::uint8_t>* out) {
  // Sizes are checked by the decoder against each other; the buffers exist or the entry is malformed.
  auto codes = w.reader.buffer(w.entry, "codes");
  auto freqs = w.reader.buffer(w.entry, "code_freqs");
  auto tiles = w.reader.buffer(w.entry, "code_tiles");
  if (!codes) return w.bad("buffers.codes", "missing");
  if (!freqs) return w.bad("buffers.code_freqs", "missing");
  if (!tiles) return w.bad("buffers.code_tiles", "missing");
  rans::symbols::StreamView v;
  v.bits = bits;
  v.prob_bits = prob_bits;
  v.tile_symbols = tile_symbols;
  v.count = count;
  v.freqs = *freqs;
  v.tile_bytes = *tiles;
  v.payload = *codes;
  const std::string what = w.reader.path() + ": tensor '" + w.entry.name + "' intq buffers.codes (rans)";
  // A few bytes of a skewed table may code up to 2^40 codes (FORMAT.md 11.2): the allocation is the bound.
  EPK_TRY(resize_for_tensor(*out, count, what));
  return rans::symbols::decode(v, *out, what);
}

}  // namespace epk::layouts::intq::detail
