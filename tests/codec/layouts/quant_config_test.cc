#include "codec/layouts/quant_config.h"

#include <gtest/gtest.h>

namespace epk::layouts {
namespace {

TEST(QuantConfig, AutoGptqQuantizeConfig) {
  auto c = parse_quant_config(R"({"bits": 4, "group_size": 128, "desc_act": true, "sym": true,
                                  "true_sequential": true, "checkpoint_format": "gptq"})",
                              "quantize_config.json");
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ(c->format, QuantFormat::kGptq);
  EXPECT_EQ(c->bits, 4);
  EXPECT_EQ(c->group_size, 128);
  EXPECT_TRUE(c->desc_act);
  EXPECT_EQ(c->gptq_zeros, GptqZeros::kV1);
}

TEST(QuantConfig, TransformersGptqV2AndAwqAndBnb) {
  auto v2 = parse_quant_config(R"({"quantization_config": {"quant_method": "gptq", "bits": 3, "group_size": -1,
                                   "checkpoint_format": "gptq_v2", "sym": false}})", "config.json");
  ASSERT_TRUE(v2);
  EXPECT_EQ(v2->gptq_zeros, GptqZeros::kV2);
  EXPECT_EQ(v2->group_size, -1);
  EXPECT_FALSE(v2->symmetric);
  auto awq = parse_quant_config(R"({"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128,
                                    "zero_point": true, "version": "GEMM"}})", "config.json");
  ASSERT_TRUE(awq);
  EXPECT_EQ(awq->format, QuantFormat::kAwq);
  EXPECT_EQ(awq->awq_version, "gemm");
  auto bnb = parse_quant_config(R"({"quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": true,
                                    "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": true}})", "config.json");
  ASSERT_TRUE(bnb);
  EXPECT_EQ(bnb->bnb_quant_type, "nf4");
}

TEST(QuantConfig, CompressedTensorsPackQuantized) {
  auto c = parse_quant_config(R"({"quantization_config": {"quant_method": "compressed-tensors",
      "format": "pack-quantized", "config_groups": {"group_0": {"targets": ["Linear"],
      "weights": {"num_bits": 4, "type": "int", "symmetric": true, "strategy": "group", "group_size": 128,
                  "actorder": null}}}}})", "config.json");
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ(c->format, QuantFormat::kCompressedTensors);
  EXPECT_EQ(c->group_size, 128);
  EXPECT_FALSE(c->desc_act);
}

TEST(QuantConfig, UnsupportedAndMalformedAreDistinguished) {
  auto gemv = parse_quant_config(R"({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "GEMV"})", "c");
  ASSERT_TRUE(gemv) << gemv.error().to_string();
  EXPECT_EQ(gemv->awq_version, "gemv");
  auto fast =
      parse_quant_config(R"({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemv_fast"})", "c");
  ASSERT_FALSE(fast);
  EXPECT_EQ(fast.error().code, ErrorCode::kUnsupported);
  auto marlin = parse_quant_config(R"({"bits": 4, "group_size": 128, "checkpoint_format": "marlin"})", "c");
  ASSERT_TRUE(marlin) << marlin.error().to_string();
  EXPECT_TRUE(marlin->gptq_marlin);
  auto bitblas = parse_quant_config(R"({"bits": 4, "group_size": 128, "checkpoint_format": "bitblas"})", "c");
  ASSERT_FALSE(bitblas);
  EXPECT_EQ(bitblas.error().code, ErrorCode::kUnsupported);
  auto bad_bits = parse_quant_config(R"({"bits": "four", "group_size": 128})", "qc.json");
  ASSERT_FALSE(bad_bits);
  EXPECT_EQ(bad_bits.error().code, ErrorCode::kBadInput);
  EXPECT_NE(bad_bits.error().message.find("qc.json"), std::string::npos);
  EXPECT_FALSE(parse_quant_config("{", "c"));
  EXPECT_FALSE(parse_quant_config(R"({"quant_method": "hqq"})", "c"));
}

}  // namespace
}  // namespace epk::layouts
