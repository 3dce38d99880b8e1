#include <gtest/gtest.h>

#include "codec/layouts/gguf.h"
#include "tests/codec/layouts/gguf_builder.h"

namespace epk::layouts::gguf {
namespace {

using testing::GgufBuilder;

std::vector<std::uint8_t> good_file() {
  GgufBuilder b;
  b.kv_u32("general.alignment", 32);
  b.kv_string("general.architecture", "llama");
  b.kv_f32_array("x", {1, 2, 3});
  b.tensor("w", {32, 2}, 2, std::string(36, '\x11'));
  b.tensor("v", {4}, 0, std::string(16, '\0'));
  return b.build();
}

// Offsets of fields in good_file(): header 24 bytes, then the first key.
constexpr std::size_t kKv0Len = 24;

Status parse(const std::vector<std::uint8_t>& bytes) {
  auto f = File::parse(bytes, "bad.gguf");
  if (!f) return std::move(f).error();
  return {};
}

TEST(GgufBadInput, EveryTruncationIsAnErrorNotACrash) {
  const auto bytes = good_file();
  ASSERT_TRUE(parse(bytes));
  for (std::size_t n = 0; n + 1 < bytes.size(); ++n) {
    std::vector<std::uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    auto st = parse(cut);
    // Cutting only trailing bytes of the last tensor still fails: its bytes run past the end.
    ASSERT_FALSE(st) << "prefix of " << n << " bytes parsed";
    ASSERT_NE(st.error().message.find("bad.gguf"), std::string::npos);
  }
}

TEST(GgufBadInput, MagicAndVersion) {
  auto bytes = good_file();
  bytes[0] = 'X';
  EXPECT_FALSE(parse(bytes));
  bytes = good_file();
  store_le<std::uint32_t>(bytes.data() + 4, 1);
  auto st = parse(bytes);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, ErrorCode::kUnsupported);
}

TEST(GgufBadInput, HugeCountsAreRefusedBeforeAllocation) {
  auto bytes = good_file();
  store_le<std::uint64_t>(bytes.data() + 16, ~0ull);  // kv_count
  auto st = parse(bytes);
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("kv_count"), std::string::npos) << st.error().message;
  bytes = good_file();
  store_le<std::uint64_t>(bytes.data() + 8, 1ull << 40);  // tensor_count
  EXPECT_FALSE(parse(bytes));
  bytes = good_file();
  store_le<std::uint64_t>(bytes.data() + kKv0Len, 1ull << 50);  // first key's length
  st = parse(bytes);
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("kv 0 key"), std::string::npos) << st.error().message;
}

TEST(GgufBadInput, HugeArrayCount) {
  GgufBuilder b;
  b.kv_f32_array("x", {1, 2});
  auto bytes = b.build();
  // key: 8 + 1, type 4, elem type 4, then the count
  store_le<std::uint64_t>(bytes.data() + kKv0Len + 9 + 4 + 4, 1ull << 61);
  auto st = parse(bytes);
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("array count"), std::string::npos) << st.error().message;
}

TEST(GgufBadInput, DeeplyNestedArrays) {
  GgufBuilder b;
  GgufBuilder::put_string(b.kv_bytes, "nest");
  append_le<std::uint32_t>(b.kv_bytes, 9);
  for (int i = 0; i < 10; ++i) {
    append_le<std::uint32_t>(b.kv_bytes, 9);
    append_le<std::uint64_t>(b.kv_bytes, 1);
  }
  append_le<std::uint32_t>(b.kv_bytes, 0);
  append_le<std::uint64_t>(b.kv_bytes, 0);
  b.n_kv = 1;
  EXPECT_FALSE(parse(b.build()));
}

TEST(GgufBadInput, BadAlignmentValues) {
  for (std::uint32_t a : {0u, 3u, 48u}) {
    GgufBuilder b;
    b.kv_u32("general.alignment", a);
    EXPECT_FALSE(parse(b.build())) << a;
  }
}

TEST(GgufBadInput, TensorInfoFields) {
  {
    GgufBuilder b;  // 5 dims
    b.tensor("w", {1, 1, 1, 1, 32}, 0, std::string(128, '\0'));
    EXPECT_FALSE(parse(b.build()));
  }
  {
    GgufBuilder b;  // ne[0] not a multiple of the Q4_0 block
    b.tensor("w", {16}, 2, std::string(18, '\0'));
    EXPECT_FALSE(parse(b.build()));
  }
  {
    GgufBuilder b;  // unknown ggml type
    b.tensor("w", {4}, 77, std::string(16, '\0'));
    auto st = parse(b.build());
    ASSERT_FALSE(st);
    EXPECT_EQ(st.error().code, ErrorCode::kUnsupported);
  }
  {
    GgufBuilder b;  // element count overflow
    b.tensor("w", {1ull << 40, 1ull << 40}, 0, std::string(4, '\0'));
    EXPECT_FALSE(parse(b.build()));
  }
  {
    GgufBuilder b;  // the element count fits but its byte size (2^62 F32 elements = 2^64 bytes) wraps to 0
    b.tensor("w", {1ull << 62}, 0, std::string(4, '\0'));
    auto st = parse(b.build());
    ASSERT_FALSE(st);
    EXPECT_NE(st.error().message.find("overflows"), std::string::npos) << st.error().message;
  }
  {
    GgufBuilder b;  // duplicate names
    b.tensor("w", {4}, 0, std::string(16, '\0'));
    b.tensor("w", {4}, 0, std::string(16, '\0'));
    EXPECT_FALSE(parse(b.build()));
  }
  {
    GgufBuilder b;  // tensor bytes past the end
    b.tensor("w", {64}, 0, std::string(16, '\0'));
    auto st = parse(b.build());
    ASSERT_FALSE(st);
    EXPECT_NE(st.error().message.find("tensor 'w'"), std::string::npos);
  }
}

TEST(GgufBadInput, MisalignedAndOverlappingOffsets) {
  GgufBuilder b;
  b.tensor("a", {8}, 0, std::string(32, '\0'));
  b.tensor("b", {8}, 0, std::string(32, '\0'));
  auto bytes = b.build();
  // info of "b": after header (24) + info a (8+1 + 4 + 8 + 4 + 8 = 33) + name b (9) + n_dims 4 + ne 8 + type 4
  const std::size_t b_offset_pos = 24 + 33 + 9 + 4 + 8 + 4;
  ASSERT_EQ(load_le<std::uint64_t>(bytes.data() + b_offset_pos), 32u);
  store_le<std::uint64_t>(bytes.data() + b_offset_pos, 16);  // misaligned
  EXPECT_FALSE(parse(bytes));
  store_le<std::uint64_t>(bytes.data() + b_offset_pos, 0);  // overlaps a
  auto st = parse(bytes);
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("overlap"), std::string::npos);
}

TEST(GgufBadInput, BoolAndUnknownValueTypes) {
  GgufBuilder b;
  GgufBuilder::put_string(b.kv_bytes, "flag");
  append_le<std::uint32_t>(b.kv_bytes, 7);
  b.kv_bytes.push_back('\x02');
  b.n_kv = 1;
  EXPECT_FALSE(parse(b.build()));
  GgufBuilder c;
  GgufBuilder::put_string(c.kv_bytes, "odd");
  append_le<std::uint32_t>(c.kv_bytes, 13);
  c.n_kv = 1;
  EXPECT_FALSE(parse(c.build()));
}

}  // namespace
}  // namespace epk::layouts::gguf
