// Which of a model's tier tensors a device lane keeps on the device when its tier budget (tier_budget_mb) cannot
// hold them all; the rest are decoded from the model's host tier (daemon/lanes/host_tiers.h). The policy follows the
// model's forward order, as the client's max_gpu_gb does (client/python/epk/_torch_host_tier.py): the tensors
// outside the blocks first (the token embedding and the LM head are read at every forward, and the embedding first
// of all), then the blocks in layer order; each tensor goes on the device if it fits what is left, so the budget is
// filled as far as it goes. Pure: tested without a GPU (tests/daemon/tier_placement_test.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace epk::daemon {

// The block a tensor belongs to: the first dot-separated component of its name that is a decimal number
// ("model.layers.12.mlp.up_proj.weight": 12), or none (embeddings, the final norm, the LM head).
std::optional<std::uint64_t> block_of(const std::string& name);

// footprint[i]: tensor i's bytes in a device region (0: not in the tier). Returns on_device[i] for every tensor: the
// tensors chosen in the order above while the sum of their footprints stays within `budget`.
std::vector<bool> place_tier(const std::vector<std::string>& names, const std::vector<std::uint64_t>& footprint,
                             std::uint64_t budget);

}  // namespace epk::daemon
