// Hostile and broken input: each case is refused with an error code and a message naming the file and the field.
// Run under the asan preset (label asan): none may crash, leak or read out of bounds.
#include <gtest/gtest.h>

#include <filesystem>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "codec/safetensors/checkpoint.h"
#include "codec/safetensors/reader.h"
#include "tests/codec/safetensors/test_files.h"

namespace epk::safetensors {
namespace {

namespace fs = std::filesystem;

std::string u64_le(std::uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape, std::uint64_t b,
                  std::uint64_t e) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
         std::to_string(b) + "," + std::to_string(e) + "]}";
}

struct Row {
  const char* name;
  std::string bytes;       // the whole file
  ErrorCode code;
  std::vector<std::string> must_name;  // besides the file path: the field (and tensor where there is one)
};

// gtest prints the row's name instead of its bytes.
void PrintTo(const Row& row, std::ostream* os) { *os << row.name; }

std::vector<Row> rows() {
  using testing::safetensors_bytes;
  return {
      {"file_shorter_than_length", "abc", ErrorCode::kBadInput, {"header length"}},
      {"header_length_past_eof", u64_le(100) + "{}", ErrorCode::kBadInput, {"header length", "100"}},
      {"header_length_near_u64_max", u64_le(~std::uint64_t{0} - 3) + "{}", ErrorCode::kBadInput, {"header length"}},
      {"header_over_100mb", u64_le(100'000'001) + "{}", ErrorCode::kBadInput, {"header length", "100000001"}},
      {"header_at_limit_past_eof", u64_le(100'000'000) + "{}", ErrorCode::kBadInput,
       {"header length", "100000000 bytes declared but only 2 follow"}},
      {"deeply_nested_arrays", safetensors_bytes(std::string(100000, '[') + std::string(100000, ']'), 0),
       ErrorCode::kBadInput, {"header", "not an object"}},
      {"deeply_nested_unclosed", safetensors_bytes("{\"a\":" + std::string(200000, '['), 0), ErrorCode::kBadInput,
       {"header", "JSON"}},
      {"empty_header", safetensors_bytes("", 0), ErrorCode::kBadInput, {"header", "JSON"}},
      {"not_json", safetensors_bytes("{not json}", 0), ErrorCode::kBadInput, {"header", "JSON"}},
      {"truncated_json", safetensors_bytes("{\"a\":{\"dtype\":\"U8\"", 0), ErrorCode::kBadInput, {"header"}},
      {"invalid_utf8", safetensors_bytes("{\"a\xff\":{}}", 0), ErrorCode::kBadInput, {"header"}},
      {"trailing_garbage", safetensors_bytes("{}x", 0), ErrorCode::kBadInput, {"header"}},
      {"json_array", safetensors_bytes("[1,2]", 0), ErrorCode::kBadInput, {"header", "array", "not an object"}},
      {"json_string", safetensors_bytes("\"x\"", 0), ErrorCode::kBadInput, {"header", "not an object"}},
      {"entry_not_object", safetensors_bytes("{\"a\":5}", 0), ErrorCode::kBadInput, {"tensor 'a'", "entry"}},
      {"missing_dtype", safetensors_bytes("{\"a\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1), ErrorCode::kBadInput,
       {"tensor 'a'", "dtype: missing"}},
      {"missing_shape", safetensors_bytes("{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1),
       ErrorCode::kBadInput, {"tensor 'a'", "shape: missing"}},
      {"missing_data_offsets", safetensors_bytes("{\"a\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1), ErrorCode::kBadInput,
       {"tensor 'a'", "data_offsets: missing"}},
      {"dtype_not_string", safetensors_bytes("{\"a\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,1]}}", 1),
       ErrorCode::kBadInput, {"tensor 'a'", "dtype"}},
      {"unknown_dtype", safetensors_bytes("{" + entry("a", "F17", "[1]", 0, 1) + "}", 1), ErrorCode::kUnsupported,
       {"tensor 'a'", "dtype", "F17"}},
      {"lowercase_dtype", safetensors_bytes("{" + entry("a", "f32", "[1]", 0, 4) + "}", 4), ErrorCode::kUnsupported,
       {"tensor 'a'", "dtype"}},
      {"negative_dim", safetensors_bytes("{" + entry("a", "U8", "[-1]", 0, 1) + "}", 1), ErrorCode::kBadInput,
       {"tensor 'a'", "shape", "-1"}},
      {"fractional_dim", safetensors_bytes("{" + entry("a", "U8", "[1.5]", 0, 1) + "}", 1), ErrorCode::kBadInput,
       {"tensor 'a'", "shape", "1.5"}},
      {"string_dim", safetensors_bytes("{" + entry("a", "U8", "[\"1\"]", 0, 1) + "}", 1), ErrorCode::kBadInput,
       {"tensor 'a'", "shape"}},
      {"dim_past_u64", safetensors_bytes("{" + entry("a", "U8", "[18446744073709551616]", 0, 1) + "}", 1),
       ErrorCode::kBadInput, {"tensor 'a'", "shape"}},
      {"shape_not_array", safetensors_bytes("{" + entry("a", "U8", "3", 0, 1) + "}", 1), ErrorCode::kBadInput,
       {"tensor 'a'", "shape"}},
      {"offsets_three_values", safetensors_bytes("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", 1),
       ErrorCode::kBadInput, {"tensor 'a'", "data_offsets"}},
      {"offsets_negative", safetensors_bytes("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}}", 1),
       ErrorCode::kBadInput, {"tensor 'a'", "data_offsets"}},
      {"hole_between_offsets",
       safetensors_bytes("{" + entry("a", "U8", "[4]", 0, 4) + "," + entry("b", "U8", "[4]", 8, 12) + "}", 12),
       ErrorCode::kBadInput, {"tensor 'b'", "data_offsets", "hole"}},
      {"hole_at_start", safetensors_bytes("{" + entry("a", "U8", "[4]", 4, 8) + "}", 8), ErrorCode::kBadInput,
       {"tensor 'a'", "data_offsets", "hole"}},
      {"overlap",
       safetensors_bytes("{" + entry("a", "U8", "[8]", 0, 8) + "," + entry("b", "U8", "[8]", 4, 12) + "}", 12),
       ErrorCode::kBadInput, {"tensor 'b'", "data_offsets", "overlaps tensor 'a'"}},
      {"same_offsets_twice",
       safetensors_bytes("{" + entry("a", "U8", "[4]", 0, 4) + "," + entry("b", "U8", "[4]", 0, 4) + "}", 4),
       ErrorCode::kBadInput, {"tensor 'b'", "data_offsets", "overlaps"}},
      {"end_before_begin", safetensors_bytes("{" + entry("a", "U8", "[0]", 0, 0) + "," +
                                             entry("b", "U8", "[4]", 4, 0) + "}", 4),
       ErrorCode::kBadInput, {"data_offsets", "end before begin"}},
      {"size_shape_mismatch", safetensors_bytes("{" + entry("a", "F32", "[2]", 0, 4) + "}", 4), ErrorCode::kBadInput,
       {"tensor 'a'", "data_offsets", "shape [2]", "needs 8"}},
      {"size_shape_mismatch_bigger", safetensors_bytes("{" + entry("a", "BF16", "[3,1]", 0, 8) + "}", 8),
       ErrorCode::kBadInput, {"tensor 'a'", "data_offsets", "shape [3, 1]"}},
      {"offsets_past_data_end", safetensors_bytes("{" + entry("a", "F32", "[2]", 0, 8) + "}", 4),
       ErrorCode::kBadInput, {"tensor 'a'", "data_offsets", "past the data end"}},
      {"offsets_near_u64_max",
       safetensors_bytes("{" + entry("a", "U8", "[0]", 0, 0) + "," +
                         entry("b", "U8", "[1]", 0, 1) + "," +
                         entry("c", "U8", "[1]", 1, 18446744073709551615ull) + "}", 1),
       ErrorCode::kBadInput, {"tensor 'c'", "data_offsets"}},
      {"trailing_bytes_not_covered", safetensors_bytes("{" + entry("a", "U8", "[4]", 0, 4) + "}", 6),
       ErrorCode::kBadInput, {"data_offsets", "not covered"}},
      {"data_but_no_tensors", safetensors_bytes("{}", 3), ErrorCode::kBadInput, {"data_offsets"}},
      {"numel_overflow", safetensors_bytes("{" + entry("a", "U8", "[4294967296,4294967296,2]", 0, 1) + "}", 1),
       ErrorCode::kBadInput, {"tensor 'a'", "shape", "overflow"}},
      {"bytes_overflow", safetensors_bytes("{" + entry("a", "F64", "[4611686018427387904]", 0, 1) + "}", 1),
       ErrorCode::kBadInput, {"tensor 'a'", "shape", "overflow"}},
      {"f4_odd_count", safetensors_bytes("{" + entry("a", "F4", "[3]", 0, 2) + "}", 2), ErrorCode::kBadInput,
       {"tensor 'a'", "shape", "whole bytes"}},
      {"f6_partial_byte", safetensors_bytes("{" + entry("a", "F6_E3M2", "[2]", 0, 2) + "}", 2), ErrorCode::kBadInput,
       {"tensor 'a'", "shape", "whole bytes"}},
      {"duplicate_tensor",
       safetensors_bytes("{" + entry("a", "U8", "[1]", 0, 1) + "," + entry("a", "U8", "[1]", 1, 2) + "}", 2),
       ErrorCode::kBadInput, {"header", "duplicate key 'a'"}},
      {"duplicate_field_in_entry",
       safetensors_bytes("{\"a\":{\"dtype\":\"U8\",\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1),
       ErrorCode::kBadInput, {"header", "duplicate key 'dtype' inside 'a'"}},
      {"metadata_value_not_string", safetensors_bytes("{\"__metadata__\":{\"k\":1}}", 0), ErrorCode::kBadInput,
       {"__metadata__", "'k'"}},
      {"metadata_not_object", safetensors_bytes("{\"__metadata__\":[\"k\"]}", 0), ErrorCode::kBadInput,
       {"__metadata__"}},
  };
}

class MalformedFile : public ::testing::TestWithParam<Row> {};

TEST_P(MalformedFile, IsRefusedNamingFileAndField) {
  const Row& row = GetParam();
  auto dir = testing::fresh_dir(std::string("bad_") + row.name);
  auto path = (dir / "bad.safetensors").string();
  testing::write_bytes(path, row.bytes);
  auto f = File::open(path);
  ASSERT_FALSE(f) << row.name << " was accepted";
  EXPECT_EQ(f.error().code, row.code) << f.error().to_string();
  const std::string& m = f.error().message;
  EXPECT_EQ(m.rfind(path, 0), 0u) << m;  // starts with the file
  for (const auto& s : row.must_name) EXPECT_NE(m.find(s), std::string::npos) << "'" << s << "' not in: " << m;

  // The same bytes as a checkpoint: the error travels up unchanged.
  auto c = Checkpoint::open(path);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().message, m);
}

INSTANTIATE_TEST_SUITE_P(Table, MalformedFile, ::testing::ValuesIn(rows()),
                         [](const ::testing::TestParamInfo<Row>& p) { return std::string(p.param.name); });

// Fixed-seed mutations of a valid file (header bytes, the length field, truncation): each either opens with every
// view inside the data section, or is refused with a message naming the file. Mostly a target for ASan/UBSan.
TEST(MalformedMutations, NeverCrashAndViewsStayInBounds) {
  const std::string good = testing::read_bytes(testing::data_dir() + "/all_dtypes.safetensors");
  ASSERT_GT(good.size(), 16u);
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<std::uint8_t>(good[i]);
  auto dir = testing::fresh_dir("mutations");
  auto path = (dir / "m.safetensors").string();
  std::mt19937_64 rng(12345);
  int opened = 0, refused = 0;
  for (int iter = 0; iter < 600; ++iter) {
    std::string b = good;
    switch (iter % 4) {
      case 0:  // one header byte replaced by a JSON-significant or random byte
      case 1: {
        const char kBytes[] = "{}[]\":,-0123456789.eE \\\xff\x00";
        std::size_t at = 8 + rng() % header_len;
        b[at] = (rng() % 2) ? kBytes[rng() % (sizeof kBytes - 1)] : static_cast<char>(rng());
        break;
      }
      case 2:  // truncated anywhere
        b.resize(rng() % b.size());
        break;
      case 3: {  // the length field perturbed
        std::uint64_t n = header_len + (rng() % 33) - 16;
        if (rng() % 8 == 0) n = rng();
        for (int i = 0; i < 8; ++i) b[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
        break;
      }
    }
    testing::write_bytes(path, b);
    auto f = File::open(path);
    if (!f) {
      ++refused;
      EXPECT_EQ(f.error().message.rfind(path, 0), 0u) << f.error().message;
      continue;
    }
    ++opened;
    const auto mapped = f->bytes_mapped();
    std::uint64_t expect_at = f->data_offset();
    for (const auto& t : f->tensors()) {
      const auto at = static_cast<std::uint64_t>(t.data.data() - mapped.data());
      EXPECT_EQ(at, expect_at) << t.name;  // contiguous, in file order
      expect_at = at + t.data.size();
    }
    EXPECT_EQ(expect_at, mapped.size());
  }
  EXPECT_GT(refused, 100);
  EXPECT_GT(opened, 0);  // e.g. a changed letter in a tensor name still leaves a valid file
}

// Index rows: a scratch copy of the sharded vector with a broken index.
fs::path sharded_with_index(const std::string& name, const std::string& index) {
  auto dir = testing::fresh_dir(name);
  for (const auto& e : fs::directory_iterator(testing::data_dir() + "/sharded")) fs::copy(e.path(), dir);
  testing::write_bytes(dir / "model.safetensors.index.json", index);
  return dir;
}

void expect_index_error(const fs::path& dir, ErrorCode code, const std::vector<std::string>& must_name) {
  auto c = Checkpoint::open(dir.string());
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, code) << c.error().to_string();
  const std::string& m = c.error().message;
  for (const auto& s : must_name) EXPECT_NE(m.find(s), std::string::npos) << "'" << s << "' not in: " << m;
}

TEST(MalformedIndex, NamesAMissingShard) {
  auto dir = sharded_with_index("idx_missing", R"({"weight_map": {
      "lm_head.weight": "model-00003-of-00003.safetensors", "extra.weight": "model-00004-of-00004.safetensors"}})");
  expect_index_error(dir, ErrorCode::kNotFound,
                     {(dir / "model.safetensors.index.json").string(), "weight_map", "tensor 'extra.weight'",
                      "model-00004-of-00004.safetensors", "does not exist"});
}

TEST(MalformedIndex, NamesATensorAbsentFromItsShard) {
  auto dir = sharded_with_index("idx_absent", R"({"weight_map": {
      "lm_head.weight": "model-00003-of-00003.safetensors", "model.norm.weight": "model-00003-of-00003.safetensors",
      "ghost.weight": "model-00003-of-00003.safetensors"}})");
  expect_index_error(dir, ErrorCode::kBadInput,
                     {(dir / "model.safetensors.index.json").string(), "weight_map", "tensor 'ghost.weight'",
                      "not present", "model-00003-of-00003.safetensors"});
}

TEST(MalformedIndex, PlacesATensorInTheWrongShard) {
  auto dir = sharded_with_index("idx_wrong", R"({"weight_map": {
      "lm_head.weight": "model-00003-of-00003.safetensors", "model.norm.weight": "model-00003-of-00003.safetensors",
      "model.embed_tokens.weight": "model-00003-of-00003.safetensors"}})");
  expect_index_error(dir, ErrorCode::kBadInput, {"weight_map", "tensor 'model.embed_tokens.weight'"});
}

TEST(MalformedIndex, NotJson) {
  auto dir = sharded_with_index("idx_notjson", "{\"weight_map\": ");
  expect_index_error(dir, ErrorCode::kBadInput, {"model.safetensors.index.json", "index", "JSON"});
}

TEST(MalformedIndex, WeightMapMissing) {
  auto dir = sharded_with_index("idx_nomap", R"({"metadata": {}})");
  expect_index_error(dir, ErrorCode::kBadInput, {"model.safetensors.index.json", "weight_map: missing"});
}

TEST(MalformedIndex, WeightMapValueNotAString) {
  auto dir = sharded_with_index("idx_value", R"({"weight_map": {"lm_head.weight": 3}})");
  expect_index_error(dir, ErrorCode::kBadInput, {"weight_map", "tensor 'lm_head.weight'"});
}

TEST(MalformedIndex, DuplicateTensorInWeightMap) {
  auto dir = sharded_with_index("idx_dup", R"({"weight_map": {"lm_head.weight": "model-00003-of-00003.safetensors",
      "lm_head.weight": "model-00001-of-00003.safetensors"}})");
  expect_index_error(dir, ErrorCode::kBadInput, {"duplicate key 'lm_head.weight' inside 'weight_map'"});
}

TEST(MalformedIndex, ShardPathLeavingTheDirectory) {
  for (const char* shard : {"../model-00003-of-00003.safetensors", "/etc/passwd", "a/../../x.safetensors", ""}) {
    auto dir = sharded_with_index("idx_escape",
                                  std::string(R"({"weight_map": {"lm_head.weight": ")") + shard + "\"}}");
    expect_index_error(dir, ErrorCode::kBadInput, {"weight_map", "tensor 'lm_head.weight'", "relative path"});
  }
}

TEST(MalformedIndex, BrokenShardIsNamed) {
  auto dir = sharded_with_index("idx_badshard", R"({"weight_map": {"lm_head.weight": "model-00003-of-00003.safetensors",
      "model.norm.weight": "model-00003-of-00003.safetensors"}})");
  testing::write_bytes(dir / "model-00003-of-00003.safetensors", testing::safetensors_bytes("[]", 0));
  expect_index_error(dir, ErrorCode::kBadInput, {(dir / "model-00003-of-00003.safetensors").string(), "header"});
}

}  // namespace
}  // namespace epk::safetensors
