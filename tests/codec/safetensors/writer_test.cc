#include "codec/safetensors/writer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "codec/safetensors/reader.h"
#include "tests/codec/safetensors/test_files.h"

namespace epk::safetensors {
namespace {

namespace fs = std::filesystem;

std::vector<TensorSpec> specs_of(const File& f) {
  std::vector<TensorSpec> specs;
  for (const auto& t : f.tensors()) specs.push_back(TensorSpec{t.name, t.dtype, t.shape});
  return specs;
}

// Rewrites `src` through the Writer, declaring tensors in a shuffled order and feeding bytes in odd-sized pieces.
Status rewrite(const File& src, const std::string& out, Order order, unsigned seed) {
  auto specs = specs_of(src);
  std::mt19937 rng(seed);
  std::shuffle(specs.begin(), specs.end(), rng);
  EPK_TRY_ASSIGN(auto w, Writer::create(out, specs, src.metadata(), order));
  for (const auto& spec : w.tensors()) {
    auto data = src.find(spec.name)->data;
    std::size_t piece = 1 + rng() % 5;
    for (std::size_t at = 0; at < data.size(); at += piece) {
      EPK_TRY(w.write(spec.name, data.subspan(at, std::min(piece, data.size() - at))));
    }
  }
  return w.finish();
}

TEST(SafetensorsWriter, ByteIdenticalToThePythonPackage) {
  auto dir = testing::fresh_dir("writer_ident");
  const char* files[] = {"all_dtypes.safetensors", "no_tensors.safetensors", "f6.safetensors",
                         "sharded/model-00001-of-00003.safetensors", "sharded/model-00002-of-00003.safetensors",
                         "sharded/model-00003-of-00003.safetensors"};
  unsigned seed = 7;
  for (const char* name : files) {
    SCOPED_TRACE(name);
    const std::string src_path = testing::data_dir() + "/" + name;
    auto src = File::open(src_path);
    ASSERT_TRUE(src) << src.error().to_string();
    auto out = (dir / fs::path(name).filename()).string();
    auto s = rewrite(*src, out, Order::kReference, seed++);
    ASSERT_TRUE(s) << s.error().to_string();
    EXPECT_EQ(testing::read_bytes(out), testing::read_bytes(src_path));
  }
}

TEST(SafetensorsWriter, AsDeclaredOrderReadsBack) {
  auto dir = testing::fresh_dir("writer_declared");
  auto out = (dir / "o.safetensors").string();
  std::vector<std::uint8_t> a = {1, 2, 3, 4, 5, 6, 7, 8}, c = {9, 9, 9};
  auto w = Writer::create(out,
                          {{"z.first", DType::kF32, {2}}, {"empty", DType::kBF16, {0, 5}}, {"a.last", DType::kU8, {3}}},
                          {{"b", "2"}, {"a", "1\n\"quoted\""}}, Order::kAsDeclared);
  ASSERT_TRUE(w) << w.error().to_string();
  EXPECT_EQ(w->next_tensor(), "z.first");
  ASSERT_TRUE(w->write("z.first", a));
  EXPECT_EQ(w->next_tensor(), "a.last");  // the empty tensor needs no bytes
  ASSERT_TRUE(w->write("empty", {}));
  ASSERT_TRUE(w->write("a.last", c));
  EXPECT_EQ(w->next_tensor(), "");
  ASSERT_TRUE(w->finish());

  auto f = File::open(out);
  ASSERT_TRUE(f) << f.error().to_string();
  ASSERT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(f->tensors()[0].name, "z.first");
  EXPECT_EQ(f->tensors()[1].name, "empty");  // offsets [8, 8]: sorts before a.last [8, 11]
  EXPECT_EQ(f->tensors()[2].name, "a.last");
  EXPECT_TRUE(std::equal(a.begin(), a.end(), f->tensors()[0].data.begin(), f->tensors()[0].data.end()));
  EXPECT_TRUE(std::equal(c.begin(), c.end(), f->tensors()[2].data.begin(), f->tensors()[2].data.end()));
  EXPECT_EQ(f->metadata().at("a"), "1\n\"quoted\"");
  EXPECT_EQ(f->metadata().at("b"), "2");
  EXPECT_EQ(f->header_size() % 8, 0u);
}

TEST(SafetensorsWriter, PieceLargerThanTheRestIsRefusedAndLeavesNoFile) {
  auto dir = testing::fresh_dir("writer_big");
  auto out = dir / "o.safetensors";
  auto w = Writer::create(out.string(), {{"t", DType::kI16, {3}}});
  ASSERT_TRUE(w);
  std::vector<std::uint8_t> four(4), three(3);
  ASSERT_TRUE(w->write("t", four));
  auto s = w->write("t", three);  // 2 bytes remain
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(s.error().message.find("tensor 't'"), std::string::npos) << s.error().message;
  EXPECT_FALSE(w->finish());
  EXPECT_FALSE(fs::exists(out));
  EXPECT_TRUE(fs::is_empty(dir));
}

TEST(SafetensorsWriter, ShortTensorIsRefusedAtFinish) {
  auto dir = testing::fresh_dir("writer_short");
  auto out = dir / "o.safetensors";
  auto w = Writer::create(out.string(), {{"t", DType::kF64, {1}}});
  ASSERT_TRUE(w);
  std::vector<std::uint8_t> seven(7);
  ASSERT_TRUE(w->write("t", seven));
  auto s = w->finish();
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("7 of 8 bytes"), std::string::npos) << s.error().message;
  EXPECT_FALSE(fs::exists(out));
}

TEST(SafetensorsWriter, TensorOutOfOrderIsRefused) {
  auto dir = testing::fresh_dir("writer_order");
  auto w = Writer::create((dir / "o.safetensors").string(), {{"a", DType::kU8, {2}}, {"b", DType::kU8, {2}}},
                          {}, Order::kAsDeclared);
  ASSERT_TRUE(w);
  std::vector<std::uint8_t> one(1);
  ASSERT_TRUE(w->write("a", one));
  auto s = w->write("b", one);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("tensor 'a' has 1 of 2 bytes"), std::string::npos) << s.error().message;
}

TEST(SafetensorsWriter, UndeclaredTensorIsRefused) {
  auto dir = testing::fresh_dir("writer_undecl");
  auto w = Writer::create((dir / "o.safetensors").string(), {{"a", DType::kU8, {1}}});
  ASSERT_TRUE(w);
  std::vector<std::uint8_t> one(1);
  auto s = w->write("nope", one);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("'nope': not declared"), std::string::npos) << s.error().message;
}

TEST(SafetensorsWriter, BadDeclarationsAreRefused) {
  auto dir = testing::fresh_dir("writer_decl");
  auto path = (dir / "o.safetensors").string();
  struct Case {
    std::vector<TensorSpec> specs;
    const char* field;
  } cases[] = {
      {{{"a", DType::kU8, {1}}, {"a", DType::kU8, {2}}}, "declared twice"},
      {{{"", DType::kU8, {1}}}, "name"},
      {{{"__metadata__", DType::kU8, {1}}}, "reserved"},
      {{{"f4", DType::kF4, {3}}}, "shape"},                                   // 12 bits
      {{{"f6", DType::kF6E2M3, {2}}}, "shape"},                               // 12 bits
      {{{"big", DType::kU8, {1ull << 32, 1ull << 32, 2}}}, "shape"},          // numel overflow
      {{{"huge", DType::kF64, {1ull << 62}}}, "shape"},                       // byte size overflow
      {{{"bad\xff", DType::kU8, {1}}}, "UTF-8"},
  };
  for (const auto& c : cases) {
    auto w = Writer::create(path, c.specs);
    ASSERT_FALSE(w) << c.field;
    EXPECT_EQ(w.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(w.error().message.find(c.field), std::string::npos) << w.error().message;
    EXPECT_NE(w.error().message.find(path), std::string::npos) << w.error().message;
  }
  EXPECT_TRUE(fs::is_empty(dir));
}

TEST(SafetensorsWriter, ReferenceOrderSortsByAlignmentThenName) {
  auto dir = testing::fresh_dir("writer_refsort");
  auto w = Writer::create((dir / "o.safetensors").string(),
                          {{"b", DType::kU8, {1}}, {"a", DType::kF4, {2}}, {"c", DType::kBF16, {1}},
                           {"d", DType::kU64, {1}},
                           {"e", DType::kBool, {1}}, {"B", DType::kU8, {1}}});
  ASSERT_TRUE(w) << w.error().to_string();
  std::vector<std::string> names;
  for (const auto& t : w->tensors()) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"d", "c", "B", "b", "a", "e"}));
}

}  // namespace
}  // namespace epk::safetensors
