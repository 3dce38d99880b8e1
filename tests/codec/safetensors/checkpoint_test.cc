#include "codec/safetensors/checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "tests/codec/safetensors/sha256.h"
#include "tests/codec/safetensors/test_files.h"

namespace epk::safetensors {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json expected() { return json::parse(testing::read_bytes(testing::data_dir() + "/expected.json")); }

// Copies the sharded vector into a scratch directory, optionally with a different index.
fs::path copy_sharded(const std::string& name, const std::string* index_text = nullptr) {
  auto dir = testing::fresh_dir(name);
  for (const auto& e : fs::directory_iterator(testing::data_dir() + "/sharded")) fs::copy(e.path(), dir);
  if (index_text) testing::write_bytes(dir / "model.safetensors.index.json", *index_text);
  return dir;
}

void expect_sharded(const Checkpoint& c) {
  json want = expected();
  std::vector<std::string> names;
  for (const auto& t : c.tensors()) names.push_back(t.name);
  EXPECT_EQ(names, want["checkpoint"]["order"].get<std::vector<std::string>>());
  EXPECT_EQ(c.metadata(), (want["checkpoint"]["metadata"].get<std::map<std::string, std::string>>()));
  ASSERT_EQ(c.shards().size(), 3u);
  for (std::size_t i = 0; i < c.tensors().size(); ++i) {
    const auto& t = c.tensors()[i];
    SCOPED_TRACE(t.name);
    const std::string shard = fs::path(c.shards()[c.shard_of(i)].path()).filename().string();
    const json& w = want["files"]["sharded/" + shard]["tensors"].at(t.name);
    EXPECT_EQ(dtype_name(t.dtype), w["dtype"].get<std::string>());
    EXPECT_EQ(t.shape, w["shape"].get<std::vector<std::uint64_t>>());
    EXPECT_EQ(testing::sha256_hex(t.data), w["sha256"].get<std::string>());
    EXPECT_EQ(c.find(t.name), &t);
  }
  EXPECT_EQ(c.find("absent"), nullptr);
  EXPECT_TRUE(c.unlisted().empty());
}

TEST(SafetensorsCheckpoint, ShardedDirectory) {
  auto c = Checkpoint::open(testing::data_dir() + "/sharded");
  ASSERT_TRUE(c) << c.error().to_string();
  expect_sharded(*c);
  EXPECT_EQ(fs::path(c->index_path()).filename(), "model.safetensors.index.json");
}

TEST(SafetensorsCheckpoint, IndexFileDirectly) {
  auto c = Checkpoint::open(testing::data_dir() + "/sharded/model.safetensors.index.json");
  ASSERT_TRUE(c) << c.error().to_string();
  expect_sharded(*c);
}

TEST(SafetensorsCheckpoint, SymlinkedShardsAsInAHubSnapshot) {
  // huggingface_hub snapshot directories hold symlinks into a blob store.
  auto dir = testing::fresh_dir("ckpt_symlinks");
  for (const auto& e : fs::directory_iterator(testing::data_dir() + "/sharded"))
    fs::create_symlink(fs::absolute(e.path()), dir / e.path().filename());
  auto c = Checkpoint::open(dir.string());
  ASSERT_TRUE(c) << c.error().to_string();
  expect_sharded(*c);
}

TEST(SafetensorsCheckpoint, MovedCheckpointKeepsItsViews) {
  auto c = Checkpoint::open(testing::data_dir() + "/sharded");
  ASSERT_TRUE(c) << c.error().to_string();
  const std::uint8_t* before = c->find("lm_head.weight")->data.data();
  Checkpoint moved = std::move(*c);
  EXPECT_EQ(moved.find("lm_head.weight")->data.data(), before);
}

TEST(SafetensorsCheckpoint, SingleFileAndDirectoryHoldingOne) {
  auto single = Checkpoint::open(testing::data_dir() + "/all_dtypes.safetensors");
  ASSERT_TRUE(single) << single.error().to_string();
  EXPECT_EQ(single->tensors().size(), expected()["files"]["all_dtypes.safetensors"]["order"].size());
  EXPECT_EQ(single->metadata().at("format"), "pt");
  EXPECT_TRUE(single->index_path().empty());

  auto dir = testing::fresh_dir("ckpt_single");
  fs::copy(testing::data_dir() + "/f6.safetensors", dir / "model.safetensors");
  auto c = Checkpoint::open(dir.string());
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ(c->tensors().size(), 2u);

  auto other = testing::fresh_dir("ckpt_other");  // one file under another name
  fs::copy(testing::data_dir() + "/f6.safetensors", other / "diffusion_pytorch_model.safetensors");
  auto c2 = Checkpoint::open(other.string());
  ASSERT_TRUE(c2) << c2.error().to_string();
  EXPECT_NE(c2->find("f6.e3m2"), nullptr);
}

TEST(SafetensorsCheckpoint, DirectoryWithoutCheckpointIsNotFound) {
  auto dir = testing::fresh_dir("ckpt_empty");
  auto c = Checkpoint::open(dir.string());
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ErrorCode::kNotFound);
  EXPECT_NE(c.error().message.find(dir.string()), std::string::npos);
}

TEST(SafetensorsCheckpoint, DirectoryWithTwoFilesAndNoIndexIsAmbiguous) {
  auto dir = testing::fresh_dir("ckpt_two");
  fs::copy(testing::data_dir() + "/f6.safetensors", dir / "a.safetensors");
  fs::copy(testing::data_dir() + "/f6.safetensors", dir / "b.safetensors");
  auto c = Checkpoint::open(dir.string());
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ErrorCode::kBadInput);
}

const char* kIndexWithoutNorm = R"({"metadata": {"total_size": 1}, "weight_map": {
  "lm_head.weight": "model-00003-of-00003.safetensors",
  "model.embed_tokens.weight": "model-00001-of-00003.safetensors",
  "model.layers.0.input_layernorm.weight": "model-00002-of-00003.safetensors",
  "model.layers.0.mlp.down_proj.weight": "model-00002-of-00003.safetensors",
  "model.layers.0.mlp.up_proj.weight": "model-00001-of-00003.safetensors",
  "model.layers.1.mlp.g_idx": "model-00002-of-00003.safetensors"}})";

TEST(SafetensorsCheckpoint, ShardTensorMissingFromWeightMapIsRefusedByDefault) {
  std::string index = kIndexWithoutNorm;
  auto dir = copy_sharded("ckpt_unlisted", &index);
  auto c = Checkpoint::open(dir.string());
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ErrorCode::kBadInput);
  const auto& m = c.error().message;
  EXPECT_NE(m.find("model.safetensors.index.json"), std::string::npos) << m;
  EXPECT_NE(m.find("weight_map"), std::string::npos) << m;
  EXPECT_NE(m.find("'model.norm.weight'"), std::string::npos) << m;
}

TEST(SafetensorsCheckpoint, ShardTensorMissingFromWeightMapIsIncludedOnRequest) {
  std::string index = kIndexWithoutNorm;
  auto dir = copy_sharded("ckpt_unlisted_inc", &index);
  auto c = Checkpoint::open(dir.string(), CheckpointOptions{UnlistedTensors::kInclude});
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ(c->tensors().size(), 7u);
  EXPECT_EQ(c->unlisted(), (std::vector<std::string>{"model.norm.weight"}));
  EXPECT_NE(c->find("model.norm.weight"), nullptr);
  EXPECT_EQ(c->metadata().at("total_size"), "1");
}

}  // namespace
}  // namespace epk::safetensors
