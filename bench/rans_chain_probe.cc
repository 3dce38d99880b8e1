// Experiment (issue 31, kept in git history only): the per-chain metadata of rANS chains of the reference format
// (start state 2^15, 32-bit final state) against a start at x0 = 1 with a per-chain startup count s0, on the fields
// of a real encode, with exact bit counts and a decode round trip.
// Build: g++ -std=c++20 -O2 -I. bench/rans_chain_probe.cc build/default/codec/libepk_codec.a -lxxhash -lpthread
// Run: ./a.out ROWS COLS BPP [F32 FILE]
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include <algorithm>
#include "codec/lattice/e8.h"
#include "codec/lattice/quantize.h"
#include "codec/model/tables.h"
#include "codec/rans/decoder.h"
#include "codec/rate/encode.h"
using namespace epk;
struct Tab { std::vector<uint32_t> f, c; int32_t min = 0; };
constexpr uint32_t L = 1u << 15;
struct Chain { std::vector<uint32_t> tab, sym; };  // encoder order
struct Out { uint64_t words = 0; uint32_t X = 0; uint32_t s0 = 0; };
// Encodes one chain alone with start x0; counts emitted words; s0 = leading symbols whose pre-state < L.
Out enc(const Chain& ch, const std::vector<Tab>& T, uint32_t P, uint32_t x0, std::vector<uint16_t>* w) {
  Out o; uint32_t x = x0; bool start = true;
  for (size_t j = 0; j < ch.sym.size(); ++j) {
    const Tab& t = T[ch.tab[j]]; uint32_t f = t.f[ch.sym[j]];
    if (x >= (f << (31 - P))) { if (w) w->push_back(uint16_t(x)); x >>= 16; ++o.words; }
    if (start && x >= L) start = false;
    if (start) ++o.s0;
    x = ((x / f) << P) + (x % f) + t.c[ch.sym[j]];
  }
  o.X = x; return o;
}
bool dec(const Chain& ch, const std::vector<Tab>& T, uint32_t P, uint32_t X, uint32_t s0, const std::vector<uint16_t>& w, uint32_t x0) {
  uint32_t x = X; size_t ptr = w.size(); uint32_t M = 1u << P;
  for (size_t jj = ch.sym.size(); jj-- > 0;) {
    const Tab& t = T[ch.tab[jj]]; uint32_t slot = x & (M - 1);
    uint32_t s = uint32_t(std::upper_bound(t.c.begin(), t.c.end(), slot) - t.c.begin()) - 1;
    while (t.f[s] == 0) --s;
    if (s != ch.sym[jj]) return false;
    x = t.f[s] * (x >> P) + slot - t.c[s];
    if (x < L && jj >= s0) { if (ptr == 0) return false; x = (x << 16) | w[--ptr]; }
  }
  return x == x0 && ptr == 0;
}
int main(int argc, char** argv) {
  uint32_t rows = atoi(argv[1]), cols = atoi(argv[2]); double bpp = atof(argv[3]);
  std::vector<float> x(size_t(rows) * cols);
  if (argc > 4) { FILE* f = fopen(argv[4], "rb"); fread(x.data(), 4, x.size(), f); fclose(f); }
  else { std::mt19937 g(42); std::normal_distribution<float> d(0, 0.02f); for (auto& v : x) v = d(g); }
  rate::EncodeOptions o; o.target_bpp = bpp;
  auto e = rate::encode({reinterpret_cast<const std::byte*>(x.data()), x.size() * 4}, rows, cols, DType::kF32, o, "x");
  if (!e) { printf("%s\n", e.error().to_string().c_str()); return 1; }
  auto s = e->view(); uint32_t P = s.prob_bits;
  std::vector<float> w(size_t(rows) * cols);
  (void)rans::decode(s, "x", DType::kF32, {reinterpret_cast<std::byte*>(w.data()), w.size() * 4});
  // fields of every vector (padded columns decode as zeros of the encoder's fill: recompute from decoded logical
  // columns only, padding vectors' extra coords taken as 0 -> only exact when cols % 8 == 0)
  size_t pc = s.padded_cols, nv = size_t(rows) * pc / 8;
  std::vector<uint8_t> cos(nv); std::vector<int32_t> fld(nv * 8);
  for (size_t v = 0; v < nv; ++v) {
    size_t r = v / (pc / 8), c0 = 8 * (v % (pc / 8)); lattice::E8Point p{};
    int par = -1;
    for (int k = 0; k < 8; ++k) {
      double t = (c0 + k < cols ? w[r * cols + c0 + k] : 0.0) / s.scales[r];
      long q = lround(2 * t); p.z[k] = int32_t(std::floor(q / 2.0)); int cc = int(q & 1); par = cc; p.c = uint8_t(cc);
    }
    (void)par; lattice::point_to_fields(p, &fld[v * 8]); cos[v] = p.c;
  }
  std::vector<Tab> T(17);
  for (int t = 0; t < 17; ++t) {
    auto m = s.tables[t]; if (m.n_symbols == 0) continue;
    T[t].min = m.sym_min; uint32_t run = 0;
    for (int a = 0; a < m.alphabet; ++a) { uint32_t f = s.freq_tables[m.freq_offset + a]; T[t].f.push_back(f); T[t].c.push_back(run); run += f; }
  }
  // chains: chain k takes vectors k, k+C, ...? No: contiguous runs of V vectors per chain (a lane's share), symbols
  // in the reference order (fields 7..0 then coset per vector).
  auto chain_of = [&](size_t v0, size_t v1) {
    Chain ch;
    for (size_t v = v0; v < v1; ++v) {
      for (int f = 7; f >= 0; --f) { int t = model::table_of(f, cos[v]); ch.tab.push_back(t); ch.sym.push_back(uint32_t(fld[v * 8 + f] - T[t].min)); }
      ch.tab.push_back(0); ch.sym.push_back(cos[v]);
    }
    return ch;
  };
  printf("%ux%u at %.2f: stored %.4f bpp (reference blob), %zu vectors, %u tiles\n", rows, cols, bpp,
         8.0 * (s.payload.size() * 2 + s.offsets.size() * 4 + s.states.size() * 4 + s.freq_tables.size() * 2 + s.scales.size() * 4 + 17 * 16) / (double(rows) * cols), nv, s.tiles());
  printf("| symbols/chain | chains | reference start: words + 32-bit states, bpp | x0 = 1: mean log2 X | max s0 | x0 = 1: words + 32-bit state + 3-bit s0 | x0 = 1: words + X in (5 + log2 X) bits + 3-bit s0 | round trip |\n|---|---|---|---|---|---|---|---|\n");
  for (size_t V : {16, 28, 57, 114, 228, 456, 912}) {
    uint64_t words_ref = 0, words_1 = 0, chains = 0; double lx = 0, lxr = 0, ideal = 0; uint32_t maxs0 = 0; bool ok = true;
    for (size_t v0 = 0; v0 < nv; v0 += V, ++chains) {
      Chain ch = chain_of(v0, std::min(nv, v0 + V));
      Out a = enc(ch, T, P, L, nullptr);
      std::vector<uint16_t> wb; Out b = enc(ch, T, P, 1, &wb);
      words_ref += a.words; words_1 += b.words; lxr += std::log2(double(a.X)); lx += std::log2(double(b.X)); maxs0 = std::max(maxs0, b.s0);
      ideal += 5 + std::floor(std::log2(double(b.X))) + 3;
      if (chains % 97 == 0) ok = ok && dec(ch, T, P, b.X, b.s0, wb, 1);
    }
    double n = double(rows) * cols;
    printf("| %zu | %lu | %.4f | %.2f | %u | %.4f | %.4f | %s |\n", V * 9, (unsigned long)chains,
           (16.0 * words_ref + 32.0 * chains) / n, lx / chains, maxs0, (16.0 * words_1 + 35.0 * chains) / n,
           (16.0 * words_1 + ideal) / n, ok ? "ok" : "FAIL");
  }
}
