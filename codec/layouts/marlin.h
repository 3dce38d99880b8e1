// Marlin layout (IST-DASLab marlin as repacked by vLLM's gptq_marlin_repack), symmetric 4- and 8-bit GPTQ
// (uint4b8 / uint8b128: zero 2^(b-1) implied, not stored).
//   qweight I32 [K/16, N*16*b/32]: the logical [K, N] codes cut into 16x16 tiles laid out row after row of tiles
//           ([K/16, 16, N/16, 16] -> (0, 2, 1, 3) -> [K/16, 16N]), every 1024-value chunk gathered through
//           marlin_weight_perm(b), then 32/b consecutive values packed LSB-first per word
//   scales  F16 [G_n, N]: each row block of 64 gathered through marlin_scale_perm() when grouped (G < K), of 32
//           through marlin_scale_perm_single() when per-channel
//   g_idx, perm I32 [K] (act-order only): rows are stored sorted by group (stable argsort of the source g_idx);
//           row j holds input feature perm[j] and group g_idx[j]; the activations are gathered through perm.
// Needs K % 16 == 0 and N % 64 == 0.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "codec/common/result.h"
#include "codec/layouts/quant_tensor.h"
#include "codec/layouts/tensor.h"

namespace epk::layouts {

// out[p] = in[perm[p]] within each 1024-value chunk. First entries for 4-bit: 0, 128, 8, 136.
std::vector<int> marlin_weight_perm(int bits);
// 64 entries (i + 8j) and 32 entries (2i + {0,1,8,9,16,17,24,25}).
std::vector<int> marlin_scale_perm();
std::vector<int> marlin_scale_perm_single();

struct MarlinViews {
  TensorView qweight;
  TensorView scales;
  std::optional<TensorView> g_idx;  // both or neither
  std::optional<TensorView> perm;
};

// k is the logical K (the packed shape only gives K/16); group_size -1 means per-channel.
Result<QuantTensor> read_marlin(const MarlinViews& v, int bits, std::int64_t k, std::int64_t group_size);

// Tensors "qweight", "scales", and for scattered groups "g_idx" and "perm" (rows sorted by sort_groups). Refuses
// asymmetric tensors (zeros other than 2^(b-1)), bits other than 4 and 8, K % 16 or N % 64 not zero.
Result<std::vector<Tensor>> write_marlin(const QuantTensor& t);

}  // namespace epk::layouts
