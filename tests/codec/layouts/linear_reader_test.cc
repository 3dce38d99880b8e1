#include "codec/layouts/linear_reader.h"

#include <gtest/gtest.h>

#include <map>

#include "codec/layouts/convert.h"
#include "tests/codec/layouts/quant_fixtures.h"

namespace epk::layouts {
namespace {

// A checkpoint-like name -> tensor map holding two layers written in one layout.
struct FakeCheckpoint {
  std::map<std::string, Tensor> tensors;
  void add(const std::string& prefix, const std::vector<Tensor>& ts) {
    for (const auto& t : ts) tensors[prefix + "." + t.name] = t;
  }
  TensorLookup lookup() const {
    return [this](std::string_view name) -> std::optional<TensorView> {
      auto it = tensors.find(std::string(name));
      if (it == tensors.end()) return std::nullopt;
      return it->second.view();
    };
  }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [n, t] : tensors) out.push_back(n);
    return out;
  }
};

TEST(LinearReader, ReadsEveryIntegerFormatThroughItsConfig) {
  auto t = testing::random_quant_tensor(4, 128, 64, 32, 7);
  struct Case {
    Layout layout;
    const char* config;
  };
  const Case cases[] = {
      {Layout::kGptqV2, R"({"bits": 4, "group_size": 32, "checkpoint_format": "gptq_v2", "sym": false})"},
      {Layout::kAwq, R"({"quant_method": "awq", "bits": 4, "group_size": 32, "version": "gemm"})"},
      {Layout::kCompressedTensors,
       R"({"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {"g": {"weights":
          {"num_bits": 4, "symmetric": false, "strategy": "group", "group_size": 32}}}})"},
  };
  for (const auto& c : cases) {
    auto written = write_layout(t, c.layout);
    ASSERT_TRUE(written);
    FakeCheckpoint ckpt;
    ckpt.add("model.layers.0.mlp.down_proj", written->tensors);
    ckpt.add("model.layers.1.mlp.down_proj", written->tensors);
    auto prefixes = quantized_linear_prefixes(ckpt.names());
    ASSERT_EQ(prefixes.size(), 2u) << layout_name(c.layout);
    auto cfg = parse_quant_config(c.config, "quantize_config.json");
    ASSERT_TRUE(cfg) << cfg.error().to_string();
    auto back = read_quantized_linear(ckpt.lookup(), prefixes[1], *cfg);
    ASSERT_TRUE(back) << layout_name(c.layout) << ": " << back.error().to_string();
    EXPECT_EQ(dequantize_f32(*back), dequantize_f32(t)) << layout_name(c.layout);
  }
}

TEST(LinearReader, MissingTensorIsNamed) {
  FakeCheckpoint ckpt;
  auto written = write_layout(testing::random_quant_tensor(4, 64, 32, 32, 1), Layout::kGptqV2);
  ASSERT_TRUE(written);
  ckpt.add("l", written->tensors);
  ckpt.tensors.erase("l.qzeros");
  auto cfg = parse_quant_config(R"({"bits": 4, "group_size": 32, "checkpoint_format": "gptq_v2"})", "c");
  ASSERT_TRUE(cfg);
  auto r = read_quantized_linear(ckpt.lookup(), "l", *cfg);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("'l.qzeros'"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace epk::layouts
