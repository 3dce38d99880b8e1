// Random logical tensors for layout tests: fixed seeds, f16-exact scales, optional GPTQ act-order g_idx.
#pragma once

#include <algorithm>
#include <numeric>
#include <random>

#include "codec/common/half.h"
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

#include <gtest/gtest.h>

#include <cstring>
#include <string_view>

#include "codec/layouts/marlin.h"
#include "codec/layouts/tensor.h"

namespace epk::layouts::testing {

inline const Tensor* find_tensor(const std::vector<Tensor>& ts, std::string_view name) {
  for (const auto& t : ts) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

inline TensorView view_of(const std::vector<Tensor>& ts, std::string_view name) {
  const Tensor* t = find_tensor(ts, name);
  EXPECT_NE(t, nullptr) << name;
  return t ? t->view() : TensorView{};
}

// The views read_marlin takes of a Marlin layout's tensors; g_idx and perm where the layout has them (act-order).
inline MarlinViews marlin_views(const std::vector<Tensor>& ts) {
  MarlinViews v{view_of(ts, "qweight"), view_of(ts, "scales"), std::nullopt, std::nullopt};
  if (find_tensor(ts, "perm")) {
    v.g_idx = view_of(ts, "g_idx");
    v.perm = view_of(ts, "perm");
  }
  return v;
}

inline std::vector<std::uint32_t> words_of_tensor(const Tensor& t) {
  std::vector<std::uint32_t> w(t.bytes.size() / 4);
  if (!w.empty()) std::memcpy(w.data(), t.bytes.data(), t.bytes.size());
  return w;
}

// Same logical content (codes, scales, zeros, g_idx, perm and sizes).
inline void expect_same_logical(const QuantTensor& a, const QuantTensor& b) {
  EXPECT_EQ(a.bits, b.bits);
  EXPECT_EQ(a.rows, b.rows);
  EXPECT_EQ(a.cols, b.cols);
  EXPECT_EQ(a.group_size, b.group_size);
  EXPECT_EQ(a.codes, b.codes);
  EXPECT_EQ(a.scales, b.scales);
  EXPECT_EQ(a.zeros, b.zeros);
  EXPECT_EQ(a.g_idx, b.g_idx);
  EXPECT_EQ(a.perm, b.perm);
}

// Zeros in 1..2^b-1 (GPTQ v1 cannot hold 0).
inline void avoid_zero_zeros(QuantTensor& t) {
  for (auto& z : t.zeros) {
    if (z == 0) z = 1;
  }
}

}  // namespace epk::layouts::testing
