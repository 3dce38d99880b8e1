// Where the bits of a stored EntroPack tensor go, and what error each overhead costs.
//   codec_overhead_bench [--rows R --cols C --dist iid|gauss|student] [--input RAW_F32 (with --rows/--cols)]
//                        [--target 4] [--tile-symbols N] [--prob-bits B]
// Encodes the layer with the default encoder (the stored rate is the reference's count: its whole quant_state blob),
// splits the stored bytes into field entropy (the empirical entropy of the 17 tables' symbols), table quantisation
// (cross-entropy under the 2^pb tables minus that), coder overhead (payload words plus the information the final
// states hold, minus the cross-entropy), tile states and offsets (less what the final states hold), frequency tables,
// row scales, stream metadata + layout, JSON header + alignment. Then, level by level, it drops the overheads from the
// count and finds the lattice scale at which the remaining count meets the target, and reports the relative L2 error
// there (nearest-point quantisation and row refit, as the encoder without RDO): "error if every overhead from this
// row down were zero". One thread.
// --native: the native stream profile (codec/rans/native_format.h) counted on the same encode at several tile sizes:
// its packed buffers, the same payload words, four 32-bit params and the two coset counts; the error counts the
// row scales' rounding to its fp16 grid. It reports the error where that count meets the target.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "bench/bench_layers.h"
#include "codec/lattice/e8.h"
#include "codec/model/tables.h"
#include "codec/rans/encoder.h"
#include "codec/rans/native_format.h"
#include "codec/rans/reference_format.h"
#include "codec/rate/encode.h"
#include "codec/rate/refit.h"
#include "codec/rate/search.h"

namespace {

using namespace epk;

struct Layer {
  std::uint32_t rows = 0;
  std::uint32_t cols = 0;
  std::uint32_t padded = 0;
  std::vector<float> x;           // padded rows
  std::vector<float> rms;
  std::vector<float> normalized;  // x / rms, as encode() forms it
  double energy = 0.0;
};

Layer prepare(const std::vector<float>& w, std::uint32_t rows, std::uint32_t cols) {
  Layer l;
  l.rows = rows;
  l.cols = cols;
  l.padded = (cols + 7) / 8 * 8;
  l.x.assign(std::size_t(rows) * l.padded, 0.0f);
  l.rms.resize(rows);
  l.normalized.resize(l.x.size());
  for (std::size_t r = 0; r < rows; ++r) {
    double sum2 = 0.0;
    for (std::size_t c = 0; c < cols; ++c) {
      const float v = w[r * cols + c];
      l.x[r * l.padded + c] = v;
      sum2 += double(v) * v;
    }
    l.energy += sum2;
    l.rms[r] = std::max(float(std::sqrt(sum2 / double(l.padded))), 1e-12f);
    for (std::size_t c = 0; c < l.padded; ++c) l.normalized[r * l.padded + c] = l.x[r * l.padded + c] / l.rms[r];
  }
  return l;
}

// Components of the stored count, in bits; cumulative levels are sums of a prefix of these.
enum Part { kEntropy, kTableQuant, kCoder, kTileMeta, kFreqTables, kRowScales, kMetaHeader, kParts };
const char* kPartName[kParts] = {"field entropy (payload information)", "table quantisation (2^pb tables)",
                                 "coder overhead (rANS)", "tile states + offsets", "frequency tables",
                                 "row scales", "stream meta, layout, JSON header"};

struct Eval {
  double scale = 0.0;
  double bits[kParts] = {};
  double rel_l2 = 0.0;
  double payload_bits = 0.0;
  double state_info_bits = 0.0;
  std::uint64_t alphabet_entries = 0;
  std::uint64_t tiles = 0;
  // --native's count (bits) and error (row scales rounded to fp16), and its parts.
  double native_bits = 0.0;
  double native_rel_l2 = 0.0;
  double native_states = 0.0;
  double native_counts = 0.0;
  double native_tables = 0.0;
  double native_scales = 0.0;
};

// The sum of squared errors the row scales add when stored on the native grid (rans::round_scales_to_native): the
// refit scale s* minimises the row's error, so a scale s adds (s - s*)^2 sum p^2.
double native_scales_extra_sse(const Layer& l, const lattice::QuantizedFields& q, const std::vector<float>& scales) {
  std::vector<float> stored = scales;
  if (!rans::round_scales_to_native(stored)) return std::numeric_limits<double>::infinity();
  const std::size_t per_row = l.padded / 8;
  double extra = 0.0;
  for (std::size_t r = 0; r < l.rows; ++r) {
    double p2 = 0.0;
    for (std::size_t v = r * per_row; v < (r + 1) * per_row; ++v) {
      const lattice::E8Point pt = lattice::fields_to_point(q.coset[v], &q.fields[v * lattice::kFields]);
      for (int i = 0; i < lattice::kDim; ++i) {
        const double c = double(lattice::coordinate(pt.z[i], pt.c));
        p2 += c * c;
      }
    }
    const double d = double(stored[r]) - double(scales[r]);
    extra += d * d * p2;
  }
  return extra;
}

// The native profile's count: its packed buffers (rans::native_sizes), the payload, and the params as four 32-bit
// values and two coset counts (the container's index entry is left out, as for the reference's blob its JSON).
void count_native(const Layer& l, const lattice::QuantizedFields& q, const rans::EncodedTensor& enc,
                  double total_sse, Eval& e) {
  const rans::NativeSizes z = rans::native_sizes(enc);
  e.native_states = 8.0 * double(z.states);
  e.native_counts = 8.0 * double(z.word_counts);
  e.native_tables = 8.0 * double(z.tables);
  e.native_scales = 8.0 * double(z.scales);
  constexpr double kParamsBits = 4 * 32 + 2 * 32;  // rows, cols, prob bits, tile symbols; the two coset counts
  e.native_bits = e.payload_bits + e.native_states + e.native_counts + e.native_tables + e.native_scales + kParamsBits;
  e.native_rel_l2 = std::sqrt((total_sse + native_scales_extra_sse(l, q, enc.scales)) / l.energy);
}

Eval evaluate(const Layer& l, double scale, int prob_bits, std::uint32_t tile_symbols) {
  Eval e;
  e.scale = scale;
  const std::size_t n = std::size_t(l.rows) * (l.padded / 8);
  lattice::QuantizedFields q;
  rate::quantize_all(l.normalized.data(), n, float(scale), q, 1);
  std::vector<float> scales;
  std::vector<double> sse;
  rate::refit_rows(l.x.data(), l.rows, l.padded, q, scale, l.rms.data(), scales, &sse, 1);
  double total_sse = 0.0;
  for (double v : sse) total_sse += v;
  e.rel_l2 = std::sqrt(total_sse / l.energy);
  const model::FieldCounts counts = model::count_fields(q.coset.data(), q.fields.data(), n);
  rans::EncodeGeometry g{l.rows, l.cols, std::uint32_t(prob_bits), tile_symbols, DType::kF32};
  auto enc = rans::encode_fields(q, scales, g, 1);
  if (!enc) {
    std::fprintf(stderr, "encode_fields at scale %g: %s\n", scale, enc.error().to_string().c_str());
    std::exit(1);
  }
  double entropy = 0.0;
  double cross = 0.0;
  for (int t = 0; t < model::kTables; ++t) {
    const model::TableCounts& tc = counts[std::size_t(t)];
    if (tc.total == 0) continue;
    const rans::TableMeta& meta = enc->tables[std::size_t(t)];
    for (std::size_t i = 0; i < tc.counts.size(); ++i) {
      const double c = double(tc.counts[i]);
      if (c == 0) continue;
      entropy -= c * std::log2(c / double(tc.total));
      const double f = enc->freq_tables[std::size_t(meta.freq_offset) + i];
      cross += c * (double(prob_bits) - std::log2(f));
    }
    e.alphabet_entries += tc.alphabet();
  }
  double info = 0.0;
  for (std::uint32_t s : enc->states) info += std::log2(double(s) / double(rans::kStateLow));
  e.tiles = enc->offsets.size() - 1;
  e.payload_bits = 16.0 * double(enc->payload.size());
  e.state_info_bits = info;
  const double blob_bits = 8.0 * double(rans::reference_quant_state_bytes(*enc));
  e.bits[kEntropy] = entropy;
  e.bits[kTableQuant] = cross - entropy;
  e.bits[kCoder] = e.payload_bits + info - cross;
  e.bits[kTileMeta] = 32.0 * double(enc->states.size() + enc->offsets.size()) - info;
  e.bits[kFreqTables] = 16.0 * double(enc->freq_tables.size());
  e.bits[kRowScales] = 32.0 * double(enc->scales.size());
  double sum = 0.0;
  for (int p = 0; p < kMetaHeader; ++p) sum += e.bits[p];
  e.bits[kMetaHeader] = blob_bits - sum;
  count_native(l, q, *enc, total_sse, e);
  return e;
}

double level_bits(const Eval& e, int level) {
  double s = 0.0;
  for (int p = 0; p <= level; ++p) s += e.bits[p];
  return s;
}

// The scale where count(e) meets target_bits (secant in log scale), and the error there (interpolated between
// the last two evaluations in log space). The error is rel_l2, or native_rel_l2 with native.
Eval solve_count(const Layer& l, const std::function<double(const Eval&)>& count, bool native, double target_bits,
                 double start, int prob_bits, std::uint32_t tile_symbols) {
  Eval a = evaluate(l, start, prob_bits, tile_symbols);
  Eval b = evaluate(l, start * (count(a) > target_bits ? 1.01 : 0.99), prob_bits, tile_symbols);
  for (int it = 0; it < 8; ++it) {
    const double fa = count(a) - target_bits;
    const double fb = count(b) - target_bits;
    if (std::fabs(fb) < 1e-4 * target_bits || fa == fb) break;
    const double la = std::log(a.scale);
    const double lb = std::log(b.scale);
    const double next = lb - fb * (lb - la) / (fb - fa);
    a = b;
    b = evaluate(l, std::exp(std::clamp(next, lb - 0.3, lb + 0.3)), prob_bits, tile_symbols);
  }
  const double fa = count(a) - target_bits;
  const double fb = count(b) - target_bits;
  Eval out = b;
  if (fa != fb) {
    const double t = fb / (fb - fa);  // weight of a
    const double ea = native ? a.native_rel_l2 : a.rel_l2;
    const double eb = native ? b.native_rel_l2 : b.rel_l2;
    out.scale = std::exp(std::log(b.scale) + t * (std::log(a.scale) - std::log(b.scale)));
    out.rel_l2 = std::exp(std::log(eb) + t * (std::log(ea) - std::log(eb)));
  } else if (native) {
    out.rel_l2 = b.native_rel_l2;
  }
  return out;
}

Eval solve(const Layer& l, int level, double target_bits, double start, int prob_bits, std::uint32_t tile_symbols) {
  return solve_count(l, [level](const Eval& e) { return level_bits(e, level); }, false, target_bits, start,
                     prob_bits, tile_symbols);
}

}  // namespace

int main(int argc, char** argv) {
  std::uint32_t rows = 2048;
  std::uint32_t cols = 2048;
  std::string dist = "iid";
  std::string input;
  double target = 4.0;
  std::uint32_t tile_symbols = 0;
  int prob_bits = 0;
  std::string native_multiples;  // --native 1,2,4: tile sizes as multiples of the encoder's
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--rows") rows = std::uint32_t(std::atoi(argv[i + 1]));
    else if (a == "--cols") cols = std::uint32_t(std::atoi(argv[i + 1]));
    else if (a == "--dist") dist = argv[i + 1];
    else if (a == "--input") input = argv[i + 1];
    else if (a == "--target") target = std::atof(argv[i + 1]);
    else if (a == "--tile-symbols") tile_symbols = std::uint32_t(std::atoi(argv[i + 1]));
    else if (a == "--prob-bits") prob_bits = std::atoi(argv[i + 1]);
    else if (a == "--native") native_multiples = argv[i + 1];
  }
  std::vector<float> w;
  if (input.empty()) {
    w = bench::make_layer(rows, cols, dist, 42);
  } else {
    w.resize(std::size_t(rows) * cols);
    if (!bench::read_f32(input, w)) {
      std::fprintf(stderr, "cannot read %s\n", input.c_str());
      return 1;
    }
    dist = input;
  }
  rate::EncodeOptions o;
  o.target_bpp = target;
  o.tile_symbols = tile_symbols;
  o.prob_bits = prob_bits;
  rate::EncodeReport rep;
  auto enc = rate::encode({reinterpret_cast<const std::byte*>(w.data()), w.size() * 4}, rows, cols, DType::kF32, o,
                          "layer", &rep);
  if (!enc) {
    std::fprintf(stderr, "%s\n", enc.error().to_string().c_str());
    return 1;
  }
  const int pb = int(enc->prob_bits);
  const std::uint32_t ts = enc->tile_symbols;
  const Layer l = prepare(w, rows, cols);
  const double nw = double(rows) * cols;
  const Eval at = evaluate(l, rep.scale, pb, ts);
  double stored = 0.0;
  for (double b : at.bits) stored += b;
  std::printf("layer %s %ux%u, target %.3f bpp, prob bits %d, tile symbols %u (%llu tiles), NF4 %.3f%%\n",
              dist.c_str(), rows, cols, target, pb, ts, (unsigned long long)at.tiles, 100 * bench::nf4_error(w, cols));
  std::printf("encoder's stream: scale %.6g, stored %.4f bpp, relative L2 %.3f%%; final states hold %.1f of %d bits "
              "a lane on average; %llu table entries\n",
              rep.scale, stored / nw, 100 * at.rel_l2, at.state_info_bits / double(at.tiles * 32), 32,
              (unsigned long long)at.alphabet_entries);
  std::printf("| part | bytes | bpp | share | error if this and every part below were zero |\n");
  std::printf("| --- | --- | --- | --- | --- |\n");
  for (int p = 0; p < kParts; ++p) {
    // Error when the count stops at the level above this part (every part from here down free).
    std::string err = "-";
    if (p > 0) {
      const Eval e = solve(l, p - 1, target * nw, rep.scale, pb, ts);
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.3f%% (scale %.5g)", 100 * e.rel_l2, e.scale);
      err = buf;
    }
    std::printf("| %s | %.0f | %.4f | %.2f%% | %s |\n", kPartName[p], at.bits[p] / 8, at.bits[p] / nw,
                100 * at.bits[p] / stored, err.c_str());
  }
  const Eval full = solve(l, kParts - 1, target * nw, rep.scale, pb, ts);
  std::printf("| all (stored) | %.0f | %.4f | 100%% | at exactly %.3f bpp stored: %.3f%% (scale %.5g) |\n",
              stored / 8, stored / nw, target, 100 * full.rel_l2, full.scale);
  if (native_multiples.empty()) return 0;
  std::printf("\nnative metadata levers (bpp at the encoder's scale; error where the count meets %.3f bpp)\n", target);
  std::printf("| tile symbols | tiles | chains | symbols a chain | states | word counts | tables | scales (fp16) | "
              "native total | reference total | native error | reference error |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  const double symbols = double(rows) * (l.padded / 8) * 9;
  for (std::size_t pos = 0; pos < native_multiples.size();) {
    const std::size_t comma = std::min(native_multiples.find(',', pos), native_multiples.size());
    const std::uint32_t ts_k = ts * std::uint32_t(std::atoi(native_multiples.substr(pos, comma - pos).c_str()));
    pos = comma + 1;
    const Eval k = evaluate(l, rep.scale, pb, ts_k);
    double ref_total = 0.0;
    for (double b : k.bits) ref_total += b;
    const Eval nat =
        solve_count(l, [](const Eval& e) { return e.native_bits; }, true, target * nw, rep.scale, pb, ts_k);
    const Eval ref = solve(l, kParts - 1, target * nw, rep.scale, pb, ts_k);
    std::printf("| %u | %llu | %llu | %.0f | %.4f | %.4f | %.4f | %.4f | %.4f | %.4f | %.3f%% | %.3f%% |\n", ts_k,
                (unsigned long long)k.tiles, (unsigned long long)(k.tiles * rans::kLanes),
                symbols / double(k.tiles * rans::kLanes), k.native_states / nw, k.native_counts / nw,
                k.native_tables / nw, k.native_scales / nw, k.native_bits / nw, ref_total / nw, 100 * nat.rel_l2,
                100 * ref.rel_l2);
  }
  return 0;
}
