// epk import / inspect / decompress / convert on quantized checkpoints, through the real binary.
#include <gtest/gtest.h>

#include "tests/tools/run_command.h"
#include <sys/wait.h>

#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "codec/layouts/awq.h"
#include "codec/layouts/gptq.h"
#include "codec/layouts/marlin.h"
#include "codec/safetensors/reader.h"
#include "tests/codec/layouts/checkpoint_fixture.h"
#include "tests/codec/layouts/intq_test_util.h"

namespace epk::layouts {
namespace {

using Outcome = epk::test::CommandResult;
// Runs the epk tool with `args`.
Outcome run(const std::string& args) { return epk::test::run_command(std::string(EPK_TOOL) + " " + args); }

const char* kGptqActOrderConfig =
    R"({"quantization_config":{"quant_method":"gptq","bits":4,"group_size":32,"desc_act":true,"sym":false,)"
    R"("checkpoint_format":"gptq"}})";

TensorView view_of(const safetensors::File& f, const std::string& name) {
  const auto* t = f.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return {};
  return TensorView{t->name, t->dtype, std::vector<std::int64_t>(t->shape.begin(), t->shape.end()), t->data};
}

// The source layer as the logical tensor (read with the GPTQ reader from the vector file itself).
QuantTensor source_gptq() {
  testing::Vectors v("gptq_4bit_v1_actorder.safetensors");
  auto t = read_gptq(GptqViews{v.view("qweight"), v.view("qzeros"), v.view("scales"), v.view("g_idx")}, 4, 32,
                     GptqZeros::kV1);
  EXPECT_TRUE(t);
  return *t;
}

TEST(EpkIntqCli, ImportPrintsEffectiveBitsAndInspectShowsThem) {
  const auto dir = testing::make_checkpoint("gptq_4bit_v1_actorder.safetensors", kGptqActOrderConfig, "cli1");
  const std::string out = dir + "/m.epk";
  auto r = run("import " + dir + " -o " + out);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("int (gptq) rans"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rANS-coded"), std::string::npos) << r.out;
  auto j = run("inspect --json " + out);
  ASSERT_EQ(j.status, 0) << j.out;
  auto doc = nlohmann::json::parse(j.out);
  bool seen = false;
  for (const auto& t : doc["tensors"]) {
    if (t["name"] != std::string(testing::kPrefix) + ".weight") continue;
    seen = true;
    EXPECT_EQ(t["encoding"], "intq");
    EXPECT_EQ(t["intq"]["kind"], "int");
    // The reference vector's codes come from a real GPTQ run: not uniform, so rANS is smaller and picked.
    EXPECT_EQ(t["intq"]["codes"], "rans");
    EXPECT_LT(t["intq"]["code_bytes"].get<std::uint64_t>(), t["intq"]["packed_code_bytes"].get<std::uint64_t>());
    EXPECT_LT(t["intq"]["codes_bpw"].get<double>(), 4.0);
    // The stored rate counts the index entry too (FORMAT.md 5.11); the intq split counts the buffers alone.
    EXPECT_DOUBLE_EQ(t["stored_bpp"].get<double>(), t["bits_per_weight"].get<double>());
    std::uint64_t buffers = 0, weights = 1;
    for (const auto& b : t["buffers"]) buffers += b["size"].get<std::uint64_t>();
    for (const auto& d : t["shape"]) weights *= d.get<std::uint64_t>();
    const std::uint64_t stored = t["stored_bytes"].get<std::uint64_t>();
    EXPECT_GT(stored, buffers);  // the index entry
    EXPECT_DOUBLE_EQ(t["intq"]["bits_per_weight"].get<double>(), 8.0 * double(buffers) / double(weights));
    EXPECT_DOUBLE_EQ(t["stored_bpp"].get<double>(), 8.0 * double(stored) / double(weights));
  }
  EXPECT_TRUE(seen);
}

TEST(EpkIntqCli, DecompressGivesAutoGptqDequantization) {
  const auto dir = testing::make_checkpoint("gptq_4bit_v1_actorder.safetensors", kGptqActOrderConfig, "cli2");
  ASSERT_EQ(run("import " + dir + " -o " + dir + "/m.epk").status, 0);
  auto r = run("decompress " + dir + "/m.epk -o " + dir + "/d.safetensors --device cpu");
  ASSERT_EQ(r.status, 0) << r.out;
  auto f = safetensors::File::open(dir + "/d.safetensors");
  ASSERT_TRUE(f) << f.error().message;
  const TensorView got = view_of(*f, std::string(testing::kPrefix) + ".weight");
  testing::Vectors v("gptq_4bit_v1_actorder.safetensors");
  const TensorView ref = v.view("ref.dequant");  // [K, N] f16
  ASSERT_EQ(got.shape, (std::vector<std::int64_t>{ref.shape[1], ref.shape[0]}));
  const std::int64_t k = ref.shape[0], n = ref.shape[1];
  for (std::int64_t a = 0; a < k; ++a)
    for (std::int64_t b = 0; b < n; ++b)
      ASSERT_EQ(std::memcmp(got.bytes.data() + 2 * (b * k + a), ref.bytes.data() + 2 * (a * n + b), 2), 0);
}

TEST(EpkIntqCli, ActOrderToAwqReportsThePermutationThatKeepsTheMatmul) {
  const auto dir = testing::make_checkpoint("gptq_4bit_v1_actorder.safetensors", kGptqActOrderConfig, "cli3");
  ASSERT_EQ(run("import " + dir + " -o " + dir + "/m.epk").status, 0);
  auto r = run("convert " + dir + "/m.epk --to awq -o " + dir + "/awq.safetensors");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("activation permutation"), std::string::npos) << r.out;
  auto f = safetensors::File::open(dir + "/awq.safetensors");
  ASSERT_TRUE(f);
  const std::string p = testing::kPrefix;
  auto it = f->metadata().find("activation_perm." + p);
  ASSERT_NE(it, f->metadata().end());
  const auto perm = nlohmann::json::parse(it->second).get<std::vector<std::int32_t>>();
  auto awq =
      read_awq(AwqViews{view_of(*f, p + ".qweight"), view_of(*f, p + ".qzeros"), view_of(*f, p + ".scales")}, 32);
  ASSERT_TRUE(awq) << awq.error().message;
  awq->perm = perm;  // the permutation the caller applies to the activations
  const QuantTensor src = source_gptq();
  std::vector<float> x(static_cast<std::size_t>(src.rows));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 11) - 5.0f;
  EXPECT_EQ(matvec(*awq, x), matvec(src, x));
  awq->perm.clear();  // without it the product is wrong although every value is intact
  EXPECT_NE(matvec(*awq, x), matvec(src, x));
}

TEST(EpkIntqCli, CheckpointToMarlinIsExact) {
  testing::Vectors v("gptq_8bit_v1_sym.safetensors");
  const auto params = v.params();
  const std::string cfg = R"({"quantization_config":{"quant_method":"gptq","bits":8,"group_size":)" +
                          std::to_string(params["group_size"].get<int>()) +
                          R"(,"desc_act":false,"sym":true,"checkpoint_format":"gptq"}})";
  const auto dir = testing::make_checkpoint("gptq_8bit_v1_sym.safetensors", cfg, "cli4");
  auto r = run("convert " + dir + " --to marlin -o " + dir + "/m.safetensors");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("exact"), std::string::npos);
  auto f = safetensors::File::open(dir + "/m.safetensors");
  ASSERT_TRUE(f);
  const std::string p = testing::kPrefix;
  auto src = read_gptq(GptqViews{v.view("qweight"), v.view("qzeros"), v.view("scales"), std::nullopt}, 8,
                       params["group_size"].get<int>(), GptqZeros::kV1);
  ASSERT_TRUE(src);
  auto back =
      read_marlin(MarlinViews{view_of(*f, p + ".qweight"), view_of(*f, p + ".scales"), std::nullopt, std::nullopt}, 8,
                  src->padded_rows, params["group_size"].get<int>());
  ASSERT_TRUE(back) << back.error().message;
  // Marlin needs N % 64 == 0: the 32 columns were padded to 64; the logical columns must be the source's.
  ASSERT_EQ(back->rows, src->rows);
  const auto got = dequantize_f32(*back), want = dequantize_f32(*src);
  for (std::int64_t k = 0; k < src->rows; ++k)
    for (std::int64_t c = 0; c < src->cols; ++c)
      ASSERT_EQ(got[static_cast<std::size_t>(k * back->cols + c)], want[static_cast<std::size_t>(k * src->cols + c)]);
}

TEST(EpkIntqCli, Nf4ToIntegerLayoutSaysRequantized) {
  const auto dir = testing::make_checkpoint(
      "bnb_nf4_f16.safetensors",
      R"({"quantization_config":{"quant_method":"bitsandbytes","load_in_4bit":true,"bnb_4bit_quant_type":"nf4"}})",
      "cli5");
  auto imp = run("import " + dir + " -o " + dir + "/m.epk");
  ASSERT_EQ(imp.status, 0) << imp.out;
  EXPECT_NE(imp.out.find("bnb4"), std::string::npos) << imp.out;
  auto r = run("convert " + dir + "/m.epk --to gptq-v2 --group-size 16 -o " + dir + "/g.safetensors");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("REQUANTIZED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("not lossless"), std::string::npos);
  auto f = safetensors::File::open(dir + "/g.safetensors");
  ASSERT_TRUE(f);
  EXPECT_NE(f->metadata().at("epk_convert").find("\"requantized\":true"), std::string::npos);
}

TEST(EpkIntqCli, BadConfigIsRefusedNamingTheFile) {
  const auto dir = testing::make_checkpoint(
      "gptq_4bit_v1_actorder.safetensors",
      R"({"quantization_config":{"quant_method":"gptq","bits":"four","group_size":32}})", "cli6");
  auto r = run("import " + dir + " -o " + dir + "/m.epk");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("config.json"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/m.epk"));
}

// Every GGUF block type import accepts, verify decodes and decompress writes as gguf-py dequantizes it (the vectors'
// NAME.ref tensors, imported beside them as raw F32).
TEST(EpkIntqCli, GgufTypesImportVerifyAndDecompressLikeGgufPy) {
  const auto dir = testing::scratch_dir("cli_gguf_types");
  const std::string src = std::string(EPK_SOURCE_DIR) + "/tests/data/gguf/gguf_types.gguf";
  auto imp = run("import " + src + " -o " + dir.string() + "/m.epk");
  ASSERT_EQ(imp.status, 0) << imp.out;
  auto ver = run("verify " + dir.string() + "/m.epk --device cpu");
  EXPECT_EQ(ver.status, 0) << ver.out;
  auto dec = run("decompress " + dir.string() + "/m.epk -o " + dir.string() + "/d.safetensors --device cpu");
  ASSERT_EQ(dec.status, 0) << dec.out;
  auto f = safetensors::File::open(dir.string() + "/d.safetensors");
  ASSERT_TRUE(f) << f.error().message;
  int compared = 0;
  for (const char* name : {"q5_0", "q5_1", "q5_0.rand", "q5_1.rand", "q2_k", "q3_k", "iq4_nl", "iq4_xs"}) {
    const TensorView got = view_of(*f, name), want = view_of(*f, std::string(name) + ".ref");
    ASSERT_EQ(got.dtype, DType::kF32) << name;
    ASSERT_EQ(got.shape, want.shape) << name;
    ASSERT_EQ(got.bytes.size(), want.bytes.size()) << name;
    EXPECT_EQ(std::memcmp(got.bytes.data(), want.bytes.data(), got.bytes.size()), 0) << name;
    ++compared;
  }
  EXPECT_EQ(compared, 8);
  std::filesystem::remove_all(dir);
}

// A stored entry that no step can decode (here a block type without a dequantizer, as a newer writer could leave) is
// not "ok" in verify, though its checksums are intact.
TEST(EpkIntqCli, VerifyFailsATensorItCannotDecode) {
  const auto dir = testing::scratch_dir("cli_verify_undecodable");
  intq::Encoded e;
  e.spec.name = "w";
  e.spec.shape = {256};
  e.spec.dtype = DType::kF32;
  e.spec.encoding = container::Encoding::kIntq;
  e.spec.params_json =
      nlohmann::json{{"version", 1}, {"kind", "gguf"}, {"ggml_type", 15}, {"ggml_name", "Q8_K"}}.dump();
  e.names = {"blocks"};
  e.storage = {std::vector<std::uint8_t>(292, 0)};
  std::vector<intq::Encoded> all{e};
  ASSERT_TRUE(testing::write_and_open((dir / "x.epk").string(), all));
  auto ver = run("verify " + (dir / "x.epk").string() + " --device cpu");
  EXPECT_EQ(ver.status, 1) << ver.out;
  EXPECT_NE(ver.out.find("BAD"), std::string::npos) << ver.out;
  EXPECT_NE(ver.out.find("Q8_K is not supported"), std::string::npos) << ver.out;
  std::filesystem::remove_all(dir);
}

TEST(EpkIntqCli, UnknownTargetIsRefused) {
  auto r = run("convert x.epk --to exl2 -o y.safetensors");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("--to"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace epk::layouts
