// End to end through the real binaries: make_demo_model -> epk pack -> epk inspect/unpack.
#include <gtest/gtest.h>

#include "tests/support/scratch_dir.h"
#include "tests/tools/run_command.h"
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "codec/safetensors/checkpoint.h"

namespace fs = std::filesystem;

namespace {

using Run = epk::test::CommandResult;
Run run(const std::string& cmd) { return epk::test::run_command(cmd); }

class EpkCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = epk::test::test_scratch_dir("epk_cli");
    auto r = run(std::string(EPK_DEMO_MODEL) + " " + (dir_ / "model").string() + " --layers 3 --hidden 64");
    ASSERT_EQ(r.status, 0) << r.out;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string tool() const { return EPK_TOOL; }
  fs::path dir_;
};

TEST_F(EpkCli, PackOfShardedCheckpointUnpacksByteIdentical) {
  auto epk_path = (dir_ / "m.epk").string();
  auto out_path = (dir_ / "back.safetensors").string();
  auto r = run(tool() + " pack " + (dir_ / "model").string() + " -o " + epk_path);
  ASSERT_EQ(r.status, 0) << r.out;
  r = run(tool() + " unpack " + epk_path + " -o " + out_path);
  ASSERT_EQ(r.status, 0) << r.out;

  auto src = epk::safetensors::Checkpoint::open((dir_ / "model").string());
  auto back = epk::safetensors::Checkpoint::open(out_path);
  ASSERT_TRUE(src) << src.error().to_string();
  ASSERT_TRUE(back) << back.error().to_string();
  ASSERT_EQ(src->tensors().size(), back->tensors().size());
  ASSERT_GT(src->tensors().size(), 20u);
  for (const auto& t : src->tensors()) {
    const auto* b = back->find(t.name);
    ASSERT_NE(b, nullptr) << t.name;
    EXPECT_EQ(b->dtype, t.dtype) << t.name;
    EXPECT_EQ(b->shape, t.shape) << t.name;
    ASSERT_EQ(b->data.size(), t.data.size()) << t.name;
    EXPECT_TRUE(std::equal(t.data.begin(), t.data.end(), b->data.begin())) << t.name;
  }
}

TEST_F(EpkCli, InspectJsonHasTheDocumentedFields) {
  auto epk_path = (dir_ / "m.epk").string();
  ASSERT_EQ(run(tool() + " pack " + (dir_ / "model").string() + " -o " + epk_path).status, 0);
  auto r = run(tool() + " inspect --json " + epk_path);
  ASSERT_EQ(r.status, 0) << r.out;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  ASSERT_TRUE(j.contains("tensors"));
  std::uint64_t sum = 0;
  for (const auto& t : j["tensors"]) {
    for (const char* field : {"name", "shape", "dtype", "encoding", "stored_bytes", "bits_per_weight", "buffers"})
      EXPECT_TRUE(t.contains(field)) << field;
    EXPECT_EQ(t["encoding"], "raw");
    EXPECT_EQ(t["dtype"], "BF16");
    // The stored rate (FORMAT.md 5.11): the buffers plus the tensor's index entry, per weight.
    std::uint64_t buffers = 0, elements = 1;
    for (const auto& b : t["buffers"]) buffers += b["size"].get<std::uint64_t>();
    for (const auto& d : t["shape"]) elements *= d.get<std::uint64_t>();
    EXPECT_EQ(buffers, 2 * elements);
    EXPECT_GT(t["stored_bytes"].get<std::uint64_t>(), buffers);
    EXPECT_DOUBLE_EQ(t["stored_bpp"].get<double>(), 8.0 * t["stored_bytes"].get<double>() / double(elements));
    EXPECT_DOUBLE_EQ(t["bits_per_weight"].get<double>(), t["stored_bpp"].get<double>());
    sum += t["stored_bytes"].get<std::uint64_t>();
  }
  EXPECT_EQ(j["totals"]["stored_bytes"].get<std::uint64_t>(), sum);
  EXPECT_EQ(j["totals"]["tensors"].get<std::size_t>(), j["tensors"].size());
  EXPECT_LT(j["padding_bytes"].get<double>(), 0.01 * j["file_bytes"].get<double>());
}

TEST_F(EpkCli, BadInputIsAClearErrorNotACrash) {
  auto bogus = (dir_ / "bogus.epk").string();
  { std::FILE* f = std::fopen(bogus.c_str(), "wb"); std::fputs("not an epk file at all", f); std::fclose(f); }
  auto r = run(tool() + " inspect " + bogus);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find(bogus), std::string::npos) << r.out;
  r = run(tool() + " pack " + (dir_ / "missing").string() + " -o " + (dir_ / "x.epk").string());
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_FALSE(fs::exists(dir_ / "x.epk"));
}

}  // namespace
