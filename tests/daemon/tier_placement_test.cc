// daemon/lanes/tier_placement.h: what a device lane keeps on the device when its tier budget cannot hold a model.
#include "daemon/lanes/tier_placement.h"

#include <gtest/gtest.h>

namespace epk::daemon {
namespace {

TEST(TierPlacement, TheBlockIsTheFirstNumberedComponent) {
  EXPECT_EQ(block_of("model.layers.12.mlp.up_proj.weight"), 12u);
  EXPECT_EQ(block_of("transformer.h.0.attn.c_attn.weight"), 0u);
  EXPECT_EQ(block_of("down_blocks.1.resnets.0.conv1.weight"), 1u);
  EXPECT_EQ(block_of("layers.7"), 7u);
  EXPECT_EQ(block_of("3.weight"), 3u);
  EXPECT_EQ(block_of("model.embed_tokens.weight"), std::nullopt);
  EXPECT_EQ(block_of("lm_head.weight"), std::nullopt);
  EXPECT_EQ(block_of("model.layers1.x"), std::nullopt);  // digits within a word are not a block
  EXPECT_EQ(block_of("a..b"), std::nullopt);
  EXPECT_EQ(block_of(""), std::nullopt);
  EXPECT_EQ(block_of("x.1234567890123456789.y"), std::nullopt);  // longer than any block number: not read
}

TEST(TierPlacement, OuterTensorsThenBlocksInLayerOrderWhileTheyFit) {
  // File order as safetensors lists names (layers sorted as text: 10 before 2), an untiered norm among them.
  const std::vector<std::string> names = {"model.embed_tokens.weight", "model.layers.0.q", "model.layers.10.q",
                                          "model.layers.2.q",          "model.norm.weight", "lm_head.weight"};
  const std::vector<std::uint64_t> size = {1000, 100, 100, 100, 0, 1000};
  // Everything fits.
  EXPECT_EQ(place_tier(names, size, 2300), (std::vector<bool>{true, true, true, true, false, true}));
  // Outer units (2000), then layer 0, then layer 2 (layer 10 comes last in layer order).
  EXPECT_EQ(place_tier(names, size, 2200), (std::vector<bool>{true, true, false, true, false, true}));
  // Not even the embedding fits 999: the blocks that do fit go on the device.
  EXPECT_EQ(place_tier(names, size, 999), (std::vector<bool>{false, true, true, true, false, false}));
  EXPECT_EQ(place_tier(names, size, 0), (std::vector<bool>(6, false)));
  // The largest budget there is: every tensor in the tier.
  const std::uint64_t huge = ~std::uint64_t{0};
  EXPECT_EQ(place_tier(names, size, huge), (std::vector<bool>{true, true, true, true, false, true}));
}

TEST(TierPlacement, WhatFitsIsUsedWithinTheBudgetExactly) {
  const std::vector<std::string> names = {"a", "layers.0.x", "layers.0.y", "layers.1.x"};
  const std::vector<std::uint64_t> size = {512, 256, 768, 256};
  // a (512), layers.0.x (256), layers.0.y does not fit 256 left, layers.1.x does.
  const std::vector<bool> got = place_tier(names, size, 1024);
  EXPECT_EQ(got, (std::vector<bool>{true, true, false, true}));
  std::uint64_t used = 0;
  for (std::size_t i = 0; i < got.size(); ++i) used += got[i] ? size[i] : 0;
  EXPECT_LE(used, 1024u);
}

}  // namespace
}  // namespace epk::daemon
