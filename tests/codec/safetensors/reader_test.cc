// The reader against files written by the real `safetensors` package (scripts/testdata/make_safetensors_vectors.py):
// every field and every byte is checked against expected.json, which Python computed.
#include "codec/safetensors/reader.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <nlohmann/json.hpp>

#include "tests/codec/safetensors/sha256.h"
#include "tests/codec/safetensors/test_files.h"

namespace epk::safetensors {
namespace {

using nlohmann::json;

json load_expected() {
  std::string text = testing::read_bytes(testing::data_dir() + "/expected.json");
  return json::parse(text);
}

void expect_matches(const File& f, const json& want) {
  SCOPED_TRACE(f.path());
  std::vector<std::string> names;
  for (const auto& t : f.tensors()) names.push_back(t.name);
  EXPECT_EQ(names, want["order"].get<std::vector<std::string>>());
  EXPECT_EQ(f.metadata(), (want["metadata"].get<std::map<std::string, std::string>>()));
  ASSERT_EQ(f.tensors().size(), want["tensors"].size());
  const auto mapped = f.bytes_mapped();
  for (const auto& t : f.tensors()) {
    SCOPED_TRACE(t.name);
    const json& w = want["tensors"].at(t.name);
    EXPECT_EQ(dtype_name(t.dtype), w["dtype"].get<std::string>());
    EXPECT_EQ(t.shape, w["shape"].get<std::vector<std::uint64_t>>());
    EXPECT_EQ(t.data.size(), w["nbytes"].get<std::size_t>());
    EXPECT_EQ(testing::sha256_hex(t.data), w["sha256"].get<std::string>());
    if (!t.data.empty()) {  // a view into the mapping, not a copy
      EXPECT_GE(t.data.data(), mapped.data() + f.data_offset());
      EXPECT_LE(t.data.data() + t.data.size(), mapped.data() + mapped.size());
    }
    EXPECT_EQ(f.find(t.name), &t);
  }
}

TEST(SafetensorsReader, EveryVectorMatchesWhatPythonRead) {
  json expected = load_expected();
  ASSERT_GE(expected["files"].size(), 6u);
  for (const auto& [name, want] : expected["files"].items()) {
    auto f = File::open(testing::data_dir() + "/" + name);
    ASSERT_TRUE(f) << f.error().to_string();
    expect_matches(*f, want);
  }
}

TEST(SafetensorsReader, AllDtypesFileHoldsEveryDtypeThePackageWrites) {
  auto f = File::open(testing::data_dir() + "/all_dtypes.safetensors");
  ASSERT_TRUE(f) << f.error().to_string();
  std::set<std::string> seen;
  for (const auto& t : f->tensors()) seen.insert(std::string(dtype_name(t.dtype)));
  for (const char* d : {"BOOL", "U8", "I8", "I16", "U16", "I32", "U32", "I64", "U64", "F16", "BF16", "F32", "F64",
                        "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4"}) {
    EXPECT_TRUE(seen.count(d)) << d;
  }
  auto f6 = File::open(testing::data_dir() + "/f6.safetensors");
  ASSERT_TRUE(f6) << f6.error().to_string();
  EXPECT_EQ(f6->find("f6.e2m3")->dtype, DType::kF6E2M3);
  EXPECT_EQ(f6->find("f6.e3m2")->dtype, DType::kF6E3M2);
  EXPECT_EQ(f6->find("f6.e2m3")->data.size(), 3u);  // 4 elements * 6 bits
}

TEST(SafetensorsReader, ScalarEmptyAndPackedShapes) {
  auto f = File::open(testing::data_dir() + "/all_dtypes.safetensors");
  ASSERT_TRUE(f) << f.error().to_string();
  const TensorView* scalar = f->find("scalar");
  ASSERT_NE(scalar, nullptr);
  EXPECT_TRUE(scalar->shape.empty());
  ASSERT_EQ(scalar->data.size(), 4u);
  float v = 0;
  std::memcpy(&v, scalar->data.data(), 4);
  EXPECT_EQ(v, 3.25f);

  const TensorView* empty = f->find("empty");
  ASSERT_NE(empty, nullptr);
  EXPECT_EQ(empty->shape, (std::vector<std::uint64_t>{0, 3}));
  EXPECT_TRUE(empty->data.empty());

  const TensorView* f4 = f->find("f4.w");  // torch float4_e2m1fn_x2 [3, 2] -> F4 [3, 4], 6 bytes
  ASSERT_NE(f4, nullptr);
  EXPECT_EQ(f4->shape, (std::vector<std::uint64_t>{3, 4}));
  EXPECT_EQ(f4->data.size(), 6u);

  const TensorView* u64 = f->find("u64.v");
  ASSERT_NE(u64, nullptr);
  std::uint64_t last = 0;
  std::memcpy(&last, u64->data.data() + 24, 8);
  EXPECT_EQ(last, ~std::uint64_t{0});

  EXPECT_EQ(f->find("absent"), nullptr);
  EXPECT_EQ(f->find("__metadata__"), nullptr);
}

TEST(SafetensorsReader, ViewsStayValidWhenTheFileMoves) {
  auto f = File::open(testing::data_dir() + "/all_dtypes.safetensors");
  ASSERT_TRUE(f);
  const std::uint8_t* before = f->find("f32.w")->data.data();
  File moved = std::move(*f);
  File assigned;
  assigned = std::move(moved);
  EXPECT_EQ(assigned.find("f32.w")->data.data(), before);
  EXPECT_EQ(assigned.find("f32.w")->data.size(), 68u);
}

TEST(SafetensorsReader, HeaderPaddingAndUnknownEntryFieldsAreAccepted) {
  auto dir = testing::fresh_dir("reader_pad");
  auto p = dir / "x.safetensors";
  // Trailing spaces, leading whitespace, an extra entry field, null __metadata__, keys out of offset order.
  testing::write_bytes(p, testing::safetensors_bytes(
      "  {\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[3,5],\"extra\":1},\"__metadata__\":null,"
      "\"a\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]}}     ", 5));
  auto f = File::open(p.string());
  ASSERT_TRUE(f) << f.error().to_string();
  ASSERT_EQ(f->tensors().size(), 2u);
  EXPECT_EQ(f->tensors()[0].name, "a");
  EXPECT_EQ(f->tensors()[1].name, "b");
  EXPECT_EQ(f->tensors()[1].data[0], 3);
  EXPECT_TRUE(f->metadata().empty());
}

TEST(SafetensorsReader, MissingFileIsAnIoError) {
  auto f = File::open("/nonexistent/epk/x.safetensors");
  ASSERT_FALSE(f);
  EXPECT_EQ(f.error().code, ErrorCode::kIo);
  EXPECT_NE(f.error().message.find("/nonexistent/epk/x.safetensors"), std::string::npos);
}

}  // namespace
}  // namespace epk::safetensors
