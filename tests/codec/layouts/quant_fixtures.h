// Random logical tensors for layout tests: fixed seeds, f16-exact scales, optional GPTQ act-order g_idx.
#pragma once

#include <algorithm>
#include <numeric>
#include <random>

#include "codec/layouts/half.h"
#include "codec/layouts/quant_tensor.h"
#include "tests/codec/layouts/probes.h"

namespace epk::layouts::testing {

// act_order: g_idx[k] = invperm[k] / G for a random permutation, as GPTQ's desc_act produces.
// symmetric: every zero 2^(bits-1); otherwise zeros uniform in 0..2^bits-1, including 0 and the maximum.
inline QuantTensor random_quant_tensor(int bits, std::int64_t rows, std::int64_t cols, std::int64_t group,
                                       std::uint32_t seed, bool act_order = false, bool symmetric = false,
                                       Probe probe = Probe::kRandom) {
  QuantTensor t = make_quant_tensor(bits, rows, cols, group);
  std::mt19937 rng(seed);
  t.codes = make_probe(probe, static_cast<std::size_t>(rows), static_cast<std::size_t>(cols), bits, seed);
  for (auto& s : t.scales) s = f16_to_f32(static_cast<std::uint16_t>(0x2000u + rng() % 0x3000u));  // (0, ~2), f16
  for (auto& z : t.zeros) z = symmetric ? (1 << (bits - 1)) : static_cast<std::int32_t>(rng() % (1u << bits));
  if (!symmetric && !t.zeros.empty()) {
    t.zeros[0] = 0;
    t.zeros.back() = (1 << bits) - 1;
  }
  if (act_order) {
    std::vector<std::int32_t> perm(static_cast<std::size_t>(rows));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<std::int32_t> inv(perm.size());
    for (std::size_t i = 0; i < perm.size(); ++i) inv[static_cast<std::size_t>(perm[i])] = static_cast<std::int32_t>(i);
    for (std::size_t k = 0; k < perm.size(); ++k) t.g_idx[k] = static_cast<std::int32_t>(inv[k] / group);
  }
  return t;
}

}  // namespace epk::layouts::testing
