// CPU throughput of the pack_bits paths (reference vs fast) and of whole-layer conversions through the logical
// tensor, for a 4096 x 14336 layer (K x N, the size the GPU figure uses). Usage: epk_layouts_bench
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "codec/layouts/convert.h"
#include "codec/layouts/gptq.h"
#include "codec/layouts/marlin.h"
#include "codec/layouts/pack_bits.h"

namespace {

using Clock = std::chrono::steady_clock;

template <class F>
double best_seconds(int reps, F&& f) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main() {
  using namespace epk::layouts;
  const std::size_t n = std::size_t{1} << 24;
  std::mt19937 rng(1);
  std::printf("pack_bits / unpack_bits, %zu codes (Mcodes/s, best of 3)\n", n);
  for (int bits : {2, 3, 4, 8}) {
    std::vector<std::uint8_t> codes(n), back(n);
    for (auto& c : codes) c = static_cast<std::uint8_t>(rng() & ((1u << bits) - 1));
    std::vector<std::uint32_t> words(packed_words(n, bits));
    const double pr = best_seconds(3, [&] { (void)pack_bits_ref(codes, bits, words); });
    const double pf = best_seconds(3, [&] { (void)pack_bits(codes, bits, words); });
    const double ur = best_seconds(3, [&] { (void)unpack_bits_ref(words, bits, back); });
    const double uf = best_seconds(3, [&] { (void)unpack_bits(words, bits, back); });
    std::printf("  %d-bit  pack ref %7.0f  fast %7.0f   unpack ref %7.0f  fast %7.0f\n", bits, n / pr / 1e6,
                n / pf / 1e6, n / ur / 1e6, n / uf / 1e6);
  }
  const std::int64_t k = 4096, cols = 14336;
  QuantTensor t = make_quant_tensor(4, k, cols, 128);
  for (auto& c : t.codes) c = static_cast<std::uint8_t>(rng() & 15);
  for (auto& s : t.scales) s = 0.01f;
  t.zeros.assign(t.zeros.size(), 8);
  std::printf("4096 x 14336 4-bit g128 (ms, best of 2)\n");
  for (Layout l : {Layout::kGptqV1, Layout::kAwq, Layout::kMarlin, Layout::kCompressedTensors}) {
    const double s = best_seconds(2, [&] { (void)write_layout(t, l); });
    std::printf("  logical -> %-8s %8.1f\n", std::string(layout_name(l)).c_str(), s * 1e3);
  }
  auto g = write_layout(t, Layout::kGptqV1);
  GptqViews v{g->tensors[0].view(), g->tensors[1].view(), g->tensors[2].view(), g->tensors[3].view()};
  const double rs = best_seconds(2, [&] { (void)read_gptq(v, 4, 128, GptqZeros::kV1); });
  std::printf("  gptq -> logical   %8.1f\n", rs * 1e3);
  const double ds = best_seconds(2, [&] { (void)dequantize_bf16(t); });
  std::printf("  logical -> bf16   %8.1f\n", ds * 1e3);
  return 0;
}
