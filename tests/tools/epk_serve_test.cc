// `epk get` and `epk status` against the real epkd serving a real .epk file (container Writer + codec encode).
#include <gtest/gtest.h>

#include "tests/support/scratch_dir.h"
#include "tests/tools/run_command.h"
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "codec/layouts/convert.h"
#include "codec/layouts/intq_io.h"
#include "codec/rans/decoder.h"
#include "tests/codec/layouts/intq_test_util.h"
#include "codec/safetensors/checkpoint.h"
#include "tests/daemon/epk_test_models.h"
#include "tests/daemon/epkd_harness.h"

namespace {

namespace fs = std::filesystem;
using namespace epk::test_models;   // NOLINT
using namespace epk::test_harness;  // NOLINT

using Run = epk::test::CommandResult;
Run run(const std::string& cmd) { return epk::test::run_command(cmd); }

constexpr std::uint32_t kRows = 45, kCols = 77;

class EpkServe : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = epk::test::test_scratch_dir("epk_serve");
    auto e = encode_f32(gaussian(kRows, kCols, 3), kRows, kCols, 4.0);
    ASSERT_TRUE(e) << e.error().to_string();
    encoded_ = std::move(*e);
    model_ = (dir_ / "m.epk").string();
    auto w = epk::container::Writer::create(model_, {});
    ASSERT_TRUE(w);
    ASSERT_TRUE(write_lattice(*w, "blk.0.w", encoded_));
    ASSERT_TRUE(write_raw(*w, "blk.0.norm", epk::DType::kF32, {3}, bytes_of(norm_)));
    ASSERT_TRUE(w->finish());
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string epk() const { return EPK_TOOL; }
  // `epk get --socket <d's socket> TENSORS -o OUT --layout LAYOUT`, then OUT opened; epk's exit code and output when
  // it fails.
  epk::Result<epk::safetensors::Checkpoint> get(const Epkd& d, const std::string& tensors, const std::string& out,
                                                const std::string& layout) {
    auto r = run(epk() + " get --socket " + d.socket() + " " + tensors + " -o " + out + " --layout " + layout);
    if (r.status != 0) {
      return epk::make_error(epk::ErrorCode::kInternal, "epk get exited " + std::to_string(r.status) + ": " + r.out);
    }
    return epk::safetensors::Checkpoint::open(out);
  }

  fs::path dir_;
  std::string model_;
  epk::rans::EncodedTensor encoded_;
  std::vector<float> norm_ = {1.0f, -0.5f, 2.0f};
};

TEST_F(EpkServe, GetWritesTheServedTensorsToSafetensors) {
  Epkd d({"--model", "m=" + model_}, "2");
  ASSERT_TRUE(d.running());
  auto ck = get(d, "m blk.0.w blk.0.norm", (dir_ / "got.safetensors").string(), "dense:bf16");
  ASSERT_TRUE(ck) << ck.error().to_string();
  const auto* w = ck->find("blk.0.w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, epk::DType::kBF16);
  EXPECT_EQ(w->shape, (std::vector<std::uint64_t>{kRows, kCols}));
  std::vector<std::byte> want(std::size_t(kRows) * kCols * 2);
  ASSERT_TRUE(epk::rans::decode(encoded_.view(), "ref", epk::DType::kBF16, want));
  ASSERT_EQ(w->data.size(), want.size());
  EXPECT_EQ(std::memcmp(w->data.data(), want.data(), want.size()), 0);
  const auto* n = ck->find("blk.0.norm");
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->dtype, epk::DType::kBF16);
  const std::uint16_t want_norm[] = {0x3F80, 0xBF00, 0x4000};
  ASSERT_EQ(n->data.size(), 6u);
  EXPECT_EQ(std::memcmp(n->data.data(), want_norm, 6), 0);
  EXPECT_EQ(d.terminate(), 0);
}

TEST_F(EpkServe, GetRowwiseWritesValuesAndRowScales) {
  Epkd d({"--model", "m=" + model_}, "2");
  ASSERT_TRUE(d.running());
  auto ck = get(d, "m blk.0.w", (dir_ / "q.safetensors").string(), "rowwise:fp8_e4m3");
  ASSERT_TRUE(ck) << ck.error().to_string();
  const auto* v = ck->find("blk.0.w");
  const auto* sc = ck->find("blk.0.w.row_scales");
  ASSERT_NE(v, nullptr);
  ASSERT_NE(sc, nullptr);
  EXPECT_EQ(v->dtype, epk::DType::kF8E4M3);
  EXPECT_EQ(sc->dtype, epk::DType::kF32);
  EXPECT_EQ(sc->shape, (std::vector<std::uint64_t>{kRows}));
  std::vector<std::byte> values(std::size_t(kRows) * kCols);
  std::vector<float> scales(kRows);
  ASSERT_TRUE(
      epk::rans::decode_rowwise(encoded_.view(), "ref", epk::rans::RowwiseType::kF8E4M3, values, scales, 0, kRows));
  ASSERT_EQ(v->data.size(), values.size());
  EXPECT_EQ(std::memcmp(v->data.data(), values.data(), values.size()), 0);
  ASSERT_EQ(sc->data.size(), kRows * 4u);
  EXPECT_EQ(std::memcmp(sc->data.data(), scales.data(), kRows * 4), 0);
  EXPECT_EQ(d.terminate(), 0);
}

TEST_F(EpkServe, GetGptqWritesEachPartAsItsOwnTensor) {
  // Asymmetric 4-bit, odd N and K not a multiple of the group: the served parts are padded as write_layout pads.
  epk::layouts::QuantTensor t = epk::layouts::testing::random_intq_tensor(4, 100, 45, 32, false, false, false, 5);
  for (auto& z : t.zeros) z = z == 0 ? 3 : z;  // GPTQ v1 stores z - 1
  const std::string q = (dir_ / "q.epk").string();
  {
    auto e = epk::layouts::intq::encode_int(t, "blk.0.q", epk::DType::kF16, "gptq");
    ASSERT_TRUE(e) << e.error().to_string();
    auto w = epk::container::Writer::create(q, {});
    ASSERT_TRUE(w);
    ASSERT_TRUE(w->add_tensor(e->spec, e->buffers()));
    ASSERT_TRUE(w->finish());
  }
  Epkd d({"--model", "q=" + q}, "2");
  ASSERT_TRUE(d.running());
  std::string out = (dir_ / "gptq.safetensors").string();
  auto ck = get(d, "q blk.0.q", out, "gptq");
  ASSERT_TRUE(ck) << ck.error().to_string();
  auto want = epk::layouts::write_layout(t, epk::layouts::Layout::kGptqV1);
  ASSERT_TRUE(want) << want.error().to_string();
  ASSERT_EQ(want->tensors.size(), 4u);
  for (const auto& part : want->tensors) {
    const auto* got = ck->find("blk.0.q." + part.name);
    ASSERT_NE(got, nullptr) << part.name;
    EXPECT_EQ(got->dtype, part.dtype) << part.name;
    EXPECT_EQ(got->shape, std::vector<std::uint64_t>(part.shape.begin(), part.shape.end())) << part.name;
    ASSERT_EQ(got->data.size(), part.bytes.size()) << part.name;
    EXPECT_EQ(std::memcmp(got->data.data(), part.bytes.data(), part.bytes.size()), 0) << part.name;
  }
  auto awq = run(epk() + " get --socket " + d.socket() + " q blk.0.q -o " + out + " --layout marlin");
  EXPECT_NE(awq.status, 0);  // asymmetric: no Marlin form
  EXPECT_NE(awq.out.find("blk.0.q"), std::string::npos) << awq.out;
  EXPECT_EQ(d.terminate(), 0);
}

TEST_F(EpkServe, StatusJsonReportsModelsCacheAndDecodes) {
  Epkd d({"--model", "m=" + model_}, "2");
  ASSERT_TRUE(d.running());
  std::string out = (dir_ / "got.safetensors").string();
  ASSERT_EQ(run(epk() + " get --socket " + d.socket() + " m blk.0.w -o " + out + " --layout dense:fp32").status, 0);
  auto r = run(epk() + " status --json --socket " + d.socket());
  ASSERT_EQ(r.status, 0) << r.out;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  ASSERT_EQ(j["models"].size(), 1u);
  EXPECT_EQ(j["models"][0]["name"], "m");
  EXPECT_EQ(j["models"][0]["tensors"], 2);
  EXPECT_EQ(j["models"][0]["cached_slots"], 1);
  EXPECT_EQ(j["models"][0]["cached_bytes"], std::uint64_t(kRows) * kCols * 4);
  EXPECT_EQ(j["models"][0]["pinned_slots"], 0);
  EXPECT_EQ(j["cache"]["budget_bytes"], 2u << 20);
  EXPECT_GE(j["cache"]["used_bytes"].get<std::uint64_t>(), std::uint64_t(kRows) * kCols * 4);
  EXPECT_EQ(j["cache"]["tensors_cached"], 1);
  EXPECT_EQ(j["cache"]["misses"], 1);  // epk get acquires twice: one miss, one hit
  EXPECT_EQ(j["cache"]["hits"], 1);
  EXPECT_EQ(j["cache"]["evictions"], 0);
  EXPECT_EQ(j["cache"]["pins"], 0);
  EXPECT_EQ(j["decode"]["decodes"], 1);
  EXPECT_GT(j["decode"]["decode_ns"].get<std::uint64_t>(), 0u);
  ASSERT_EQ(j["pools"].size(), 1u);
  EXPECT_EQ(j["pools"][0]["kind"], "host");
  EXPECT_EQ(j["pools"][0]["budget_bytes"], 2u << 20);
  EXPECT_EQ(j["pools"][0]["used_bytes"], j["cache"]["used_bytes"]);  // one pool: its figures are the totals
  EXPECT_EQ(j["pools"][0]["hits"], 1);
  EXPECT_EQ(j["pools"][0]["pins"], 0);
  r = run(epk() + " status --socket " + d.socket());  // the table form
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("hits 1, misses 1, evictions 0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("pool 0 (host)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("of 2.00 MiB budget"), std::string::npos) << r.out;
  EXPECT_EQ(d.terminate(), 0);
}

TEST_F(EpkServe, ErrorsNameWhatWentWrong) {
  Epkd d({"--model", "m=" + model_}, "2");
  ASSERT_TRUE(d.running());
  std::string out = (dir_ / "x.safetensors").string();
  auto r = run(epk() + " get --socket " + d.socket() + " nomodel blk.0.w -o " + out);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("nomodel"), std::string::npos) << r.out;
  r = run(epk() + " get --socket " + d.socket() + " m blk.9.w -o " + out);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("blk.9.w"), std::string::npos) << r.out;
  r = run(epk() + " get --socket " + d.socket() + " m blk.0.w -o " + out + " --layout dense:fp7");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("dense:fp7"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out));
  r = run(epk() + " status --socket " + (dir_ / "nobody.sock").string());
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("epk status:"), std::string::npos) << r.out;
  EXPECT_EQ(d.terminate(), 0);
}

}  // namespace
