// A one-layer quantized checkpoint directory built from a committed reference-vector file: its tensors (except
// ref.* and logical.*) renamed under kPrefix, a raw norm, and the given config.json.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "codec/safetensors/writer.h"
#include "tests/codec/layouts/intq_test_util.h"
#include "tests/codec/layouts/vectors.h"

namespace epk::layouts::testing {

inline constexpr const char* kPrefix = "model.layers.0.mlp.up_proj";

// Writes the vector file's tensors (except ref.* and logical.*) under kPrefix, plus a raw norm, and config.json.
inline std::string make_checkpoint(const std::string& vector_file, const std::string& config, const std::string& tag) {
  Vectors v(vector_file);
  EXPECT_TRUE(v.ok());
  const auto dir = scratch_dir("ckpt_" + tag);
  std::vector<safetensors::TensorSpec> specs;
  std::vector<TensorView> views;
  for (const auto& name : v.names()) {
    // Reference outputs and other packings of the same codes (gemm.* beside a GEMV vector) are not checkpoint tensors.
    if (name.rfind("ref.", 0) == 0 || name.rfind("logical.", 0) == 0 || name.rfind("gemm.", 0) == 0) continue;
    TensorView tv = v.view(name);
    specs.push_back(
        {std::string(kPrefix) + "." + name, tv.dtype, std::vector<std::uint64_t>(tv.shape.begin(), tv.shape.end())});
    views.push_back(tv);
  }
  const std::uint8_t norm[8] = {0, 0x3C, 0, 0x3C, 0, 0x40, 0, 0x40};
  specs.push_back({"model.norm.weight", DType::kF16, {4}});
  auto w =
      safetensors::Writer::create((dir / "model.safetensors").string(), specs, {}, safetensors::Order::kAsDeclared);
  EXPECT_TRUE(w);
  for (std::size_t i = 0; i < views.size(); ++i) EXPECT_TRUE(w->write(specs[i].name, views[i].bytes));
  EXPECT_TRUE(w->write("model.norm.weight", norm));
  EXPECT_TRUE(w->finish());
  std::ofstream(dir / "config.json") << config;
  return dir.string();
}

}  // namespace epk::layouts::testing
