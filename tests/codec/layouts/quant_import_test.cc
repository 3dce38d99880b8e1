// Import end to end: a checkpoint directory built from the committed reference vectors (tensors renamed under a layer
// prefix, with its config.json) or the committed GGUF file goes through QuantSource and the intq encoding into an
// .epk, and dequantize_intq gives the reference library's own dequantization bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "codec/layouts/intq_io.h"
#include "codec/layouts/quant_config.h"
#include "codec/safetensors/writer.h"
#include "codec/layouts/quant_source.h"
#include "tests/codec/layouts/checkpoint_fixture.h"
#include "tests/codec/layouts/intq_test_util.h"
#include "tests/codec/layouts/vectors.h"

namespace epk::layouts {
namespace {

using testing::kPrefix;
using testing::make_checkpoint;

// Imports `path` into an .epk and returns the dequantized weight of `name` in `dtype`.
std::vector<std::uint8_t> import_and_dequantize(const std::string& path, const std::string& name, DType dtype,
                                                std::vector<std::uint64_t>* shape, std::string* kind = nullptr) {
  auto src = QuantSource::open(path);
  EXPECT_TRUE(src) << src.error().message;
  if (!src) return {};
  std::vector<intq::Encoded> encoded;
  bool found = false;
  for (const auto& item : (*src)->items()) {
    if (item.name != name) continue;
    found = true;
    Result<intq::Encoded> e = make_error(ErrorCode::kInternal, "kind");
    if (item.kind == SourceItem::Kind::kInt) {
      auto t = item.load_int();
      EXPECT_TRUE(t) << t.error().message;
      e = intq::encode_int(*t, item.name, item.dtype, item.source);
    } else if (item.kind == SourceItem::Kind::kGguf) {
      e = intq::encode_gguf(item.gguf_info, item.bytes, item.name);
    } else if (item.kind == SourceItem::Kind::kBnb4) {
      e = intq::encode_bnb4(item.bnb_views, item.name);
    }
    EXPECT_TRUE(e) << e.error().message;
    if (e) encoded.push_back(std::move(*e));
  }
  EXPECT_TRUE(found) << name;
  const auto dir = testing::scratch_dir("imp");
  auto r = testing::write_and_open((dir / "out.epk").string(), encoded);
  EXPECT_TRUE(r) << r.error().message;
  if (!r || r->tensors().empty()) return {};
  const auto& entry = r->tensors()[0];
  *shape = entry.shape;
  if (kind) *kind = intq::kind_of(*r, entry) ? std::string(nlohmann::json::parse(entry.params_json)["kind"]) : "";
  std::vector<std::uint8_t> out(entry.element_count() * static_cast<std::size_t>(dtype_bits(dtype) / 8));
  auto st = intq::dequantize_intq(*r, entry, dtype, out);
  EXPECT_TRUE(st) << st.error().message;
  return out;
}

// ref is [K, N] (GPTQ/AWQ orientation); got is [N, K].
void expect_transposed_equal(const TensorView& ref, const std::vector<std::uint8_t>& got) {
  const std::int64_t k = ref.shape[0], n = ref.shape[1];
  const std::size_t w = static_cast<std::size_t>(dtype_bits(ref.dtype) / 8);
  ASSERT_EQ(got.size(), ref.bytes.size());
  for (std::int64_t r = 0; r < k; ++r)
    for (std::int64_t c = 0; c < n; ++c)
      ASSERT_EQ(std::memcmp(got.data() + (c * k + r) * w, ref.bytes.data() + (r * n + c) * w, w), 0) << r << "," << c;
}

// The f16 weight kPrefix.weight of checkpoint `dir`, imported and dequantized, equals the ref.dequant of vector file
// `vectors` (a [K, N] reference); returns the imported shape.
std::vector<std::uint64_t> expect_dequantizes_like_reference(const std::string& dir, const char* vectors) {
  std::vector<std::uint64_t> shape;
  auto got = import_and_dequantize(dir, std::string(kPrefix) + ".weight", DType::kF16, &shape);
  testing::Vectors v(vectors);
  expect_transposed_equal(v.view("ref.dequant"), got);
  return shape;
}

TEST(QuantImport, GptqActOrderCheckpointDequantizesLikeAutoGptq) {
  const auto dir = make_checkpoint(
      "gptq_4bit_v1_actorder.safetensors",
      R"({"quantization_config":{"quant_method":"gptq","bits":4,"group_size":32,"desc_act":true,"sym":false,)"
      R"("checkpoint_format":"gptq"}})",
      "gptq");
  auto src = QuantSource::open(dir);
  ASSERT_TRUE(src) << src.error().message;
  EXPECT_EQ((*src)->format(), "gptq");
  ASSERT_EQ((*src)->items().size(), 2u);
  EXPECT_EQ((*src)->items()[1].kind, SourceItem::Kind::kRaw);
  const auto shape = expect_dequantizes_like_reference(dir, "gptq_4bit_v1_actorder.safetensors");
  EXPECT_EQ(shape, (std::vector<std::uint64_t>{64, 256}));
}

TEST(QuantImport, AwqCheckpointDequantizesLikeAutoAwq) {
  const auto dir = make_checkpoint(
      "awq_4bit_g64.safetensors",
      R"({"quantization_config":{"quant_method":"awq","bits":4,"group_size":64,"zero_point":true,"version":"gemm"}})",
      "awq");
  expect_dequantizes_like_reference(dir, "awq_4bit_g64.safetensors");
}

TEST(QuantImport, AwqGemvCheckpointDequantizesLikeAutoAwq) {
  const auto dir = make_checkpoint(
      "awq_gemv_4bit_g64.safetensors",
      R"({"quantization_config":{"quant_method":"awq","bits":4,"group_size":64,"zero_point":true,"version":"gemv"}})",
      "awq_gemv");
  expect_dequantizes_like_reference(dir, "awq_gemv_4bit_g64.safetensors");
}

// GPTQ checkpoints saved in Marlin format (AutoGPTQ checkpoint_format "marlin", vLLM's MarlinConfig): B, s and a
// workspace per layer, built here from the vLLM-packed Marlin vector; the import dequantizes to s * (q - 8).
std::vector<std::uint16_t> marlin_vector_dequant_f16(testing::Vectors& v) {
  QuantTensor t = make_quant_tensor(4, 256, 128, 64);
  t.codes = v.values<std::uint8_t>("logical.codes");
  const TensorView s = v.view("logical.scales");
  for (std::size_t i = 0; i < t.scales.size(); ++i) t.scales[i] = view_float(s, i);
  t.zeros.assign(t.zeros.size(), 8);
  return dequantize_f16(t);
}

TEST(QuantImport, GptqMarlinFormatCheckpointWithBAndS) {
  testing::Vectors v("marlin_4bit_g64.safetensors");
  ASSERT_TRUE(v.ok());
  const auto dir = testing::scratch_dir("ckpt_marlin_bs");
  const std::string p = std::string(kPrefix);
  const std::vector<std::int32_t> workspace(128 / 64 * 16, 0);
  std::vector<safetensors::TensorSpec> specs = {{p + ".B", DType::kI32, {16, 256}},
                                                {p + ".s", DType::kF16, {4, 128}},
                                                {p + ".workspace", DType::kI32, {workspace.size()}}};
  auto w =
      safetensors::Writer::create((dir / "model.safetensors").string(), specs, {}, safetensors::Order::kAsDeclared);
  ASSERT_TRUE(w);
  ASSERT_TRUE(w->write(p + ".B", v.view("qweight").bytes));
  ASSERT_TRUE(w->write(p + ".s", v.view("scales").bytes));
  ASSERT_TRUE(
      w->write(p + ".workspace", {reinterpret_cast<const std::uint8_t*>(workspace.data()), workspace.size() * 4}));
  ASSERT_TRUE(w->finish());
  std::ofstream(dir / "quantize_config.json")
      << R"({"bits": 4, "group_size": 64, "desc_act": false, "sym": true, "checkpoint_format": "marlin"})";
  auto src = QuantSource::open(dir.string());
  ASSERT_TRUE(src) << src.error().message;
  std::size_t items = 0;
  for (const auto& item : (*src)->items()) {
    ++items;
    EXPECT_EQ(item.kind, SourceItem::Kind::kInt) << item.name;  // the workspace is not carried as a raw tensor
    EXPECT_EQ(item.source, "gptq-marlin");
  }
  EXPECT_EQ(items, 1u);
  std::vector<std::uint64_t> shape;
  auto got = import_and_dequantize(dir.string(), p + ".weight", DType::kF16, &shape);
  EXPECT_EQ(shape, (std::vector<std::uint64_t>{128, 256}));
  const auto want = marlin_vector_dequant_f16(v);  // [K, N]
  ASSERT_EQ(got.size(), want.size() * 2);
  std::size_t bad = 0;
  for (std::size_t k = 0; k < 256; ++k) {
    for (std::size_t n = 0; n < 128; ++n) {
      std::uint16_t g;
      std::memcpy(&g, got.data() + 2 * (n * 256 + k), 2);
      bad += g != want[k * 128 + n];
    }
  }
  EXPECT_EQ(bad, 0u);
}

TEST(QuantImport, GptqMarlinFormatByIsMarlinFormatFlagAndQweightNames) {
  const auto dir = make_checkpoint("marlin_4bit_g64.safetensors",
                                   R"({"bits": 4, "group_size": 64, "desc_act": false, "is_marlin_format": true})",
                                   "marlin_flag");
  std::vector<std::uint64_t> shape;
  auto got = import_and_dequantize(dir, std::string(kPrefix) + ".weight", DType::kF16, &shape);
  testing::Vectors v("marlin_4bit_g64.safetensors");
  const auto want = marlin_vector_dequant_f16(v);
  ASSERT_EQ(got.size(), want.size() * 2);
  std::uint16_t first;
  std::memcpy(&first, got.data(), 2);
  EXPECT_EQ(first, want[0]);
  std::uint16_t last;
  std::memcpy(&last, got.data() + got.size() - 2, 2);
  EXPECT_EQ(last, want.back());
}

TEST(QuantImport, GptqMarlinFormatWithActOrderOrEightBitsIsUnsupported) {
  for (const char* cfg : {R"({"bits": 4, "group_size": 64, "desc_act": true, "checkpoint_format": "marlin"})",
                          R"({"bits": 8, "group_size": 64, "checkpoint_format": "marlin"})",
                          R"({"bits": 4, "group_size": 64, "sym": false, "checkpoint_format": "marlin"})"}) {
    auto c = parse_quant_config(cfg, "quantize_config.json");
    ASSERT_FALSE(c) << cfg;
    EXPECT_EQ(c.error().code, ErrorCode::kUnsupported) << cfg;
  }
}

TEST(QuantImport, Nf4DoubleQuantCheckpointIsStoredVerbatimAndDequantizesLikeBitsandbytes) {
  const auto dir = make_checkpoint(
      "bnb_nf4_dq_bf16.safetensors",
      R"({"quantization_config":{"quant_method":"bitsandbytes","load_in_4bit":true,"bnb_4bit_quant_type":"nf4",)"
      R"("bnb_4bit_use_double_quant":true}})",
      "bnb");
  std::vector<std::uint64_t> shape;
  std::string kind;
  auto got = import_and_dequantize(dir, std::string(kPrefix) + ".weight", DType::kBF16, &shape, &kind);
  EXPECT_EQ(kind, "bnb4");
  testing::Vectors v("bnb_nf4_dq_bf16.safetensors");
  const TensorView ref = v.view("ref.dequant");
  ASSERT_EQ(got.size(), ref.bytes.size());
  EXPECT_EQ(std::memcmp(got.data(), ref.bytes.data(), got.size()), 0);
}

TEST(QuantImport, CompressedTensorsCheckpointDequantizesLikeCompressedTensors) {
  const auto dir = make_checkpoint(
      "ct_4bit_asym_g64_f16.safetensors",
      R"({"quantization_config":{"quant_method":"compressed-tensors","format":"pack-quantized","config_groups":)"
      R"({"group_0":{"weights":{"num_bits":4,"group_size":64,"symmetric":false,"strategy":"group","type":"int"}}}}})",
      "ct");
  std::vector<std::uint64_t> shape;
  auto got = import_and_dequantize(dir, std::string(kPrefix) + ".weight", DType::kF16, &shape);
  testing::Vectors v("ct_4bit_asym_g64_f16.safetensors");
  const TensorView ref = v.view("ref.dequant");  // [N, K]: the nn.Linear orientation, as ours
  EXPECT_EQ(shape, (std::vector<std::uint64_t>{40, 128}));
  ASSERT_EQ(got.size(), ref.bytes.size());
  EXPECT_EQ(std::memcmp(got.data(), ref.bytes.data(), got.size()), 0);
}

class GgufImport : public ::testing::TestWithParam<const char*> {};

TEST_P(GgufImport, TensorDequantizesLikeGgufPy) {
  const std::string name = GetParam();
  std::vector<std::uint64_t> shape;
  std::string kind;
  auto got = import_and_dequantize(testing::vector_path("gguf_small.gguf"), name, DType::kF32, &shape, &kind);
  // Q4_0 and Q8_0 are integer grids (kind int); the others keep their blocks (kind gguf).
  EXPECT_EQ(kind, (name == "q4_0" || name == "q8_0") ? "int" : "gguf");
  testing::Vectors v("gguf_small_ref.safetensors");
  const TensorView ref = v.view("ref." + name);
  ASSERT_EQ(got.size(), ref.bytes.size());
  EXPECT_EQ(std::memcmp(got.data(), ref.bytes.data(), got.size()), 0);
}

INSTANTIATE_TEST_SUITE_P(Reference, GgufImport, ::testing::Values("q4_0", "q4_1", "q8_0", "q4_k", "q5_k", "q6_k"));

}  // namespace
}  // namespace epk::layouts
