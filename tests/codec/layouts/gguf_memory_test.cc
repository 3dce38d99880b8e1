// GGUF arrays of fixed-size elements stay spans into the file: parsing a file with a 16 M-element u8 array allocates
// a bounded number of bytes (counted by this binary's operator new), not one Value per element. Its own binary,
// because the counting operator new replaces the global one.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "codec/layouts/gguf.h"
#include "tests/codec/layouts/gguf_builder.h"

namespace {
std::atomic<std::uint64_t> g_allocated{0};
std::atomic<std::uint64_t> g_allocations{0};
}  // namespace

// The replacement pair is malloc/free on both sides; GCC cannot see that operator new here is ours.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
  g_allocated += n;
  ++g_allocations;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace epk::layouts::gguf {
namespace {

TEST(GgufMemory, LargePrimitiveArraysAreSpansNotValues) {
  constexpr std::uint64_t kCount = 16u << 20;
  testing::GgufBuilder b;
  b.kv_string("general.name", "big");
  // A u8 array of kCount elements (type 9, element type 0), as a tokenizer's token_type or a scores table would be.
  testing::GgufBuilder::put_string(b.kv_bytes, "big.u8");
  append_le<std::uint32_t>(b.kv_bytes, 9);
  append_le<std::uint32_t>(b.kv_bytes, 0);
  append_le<std::uint64_t>(b.kv_bytes, kCount);
  for (std::uint64_t i = 0; i < kCount; ++i) b.kv_bytes.push_back(static_cast<char>(i * 7));
  ++b.n_kv;
  b.kv_f32_array("small.f32", {1.5f, -2.0f, 3.25f});
  const auto bytes = b.build();

  const std::uint64_t before = g_allocated, count_before = g_allocations;
  auto f = File::parse(bytes, "big.gguf");
  const std::uint64_t allocated = g_allocated - before, allocations = g_allocations - count_before;
  ASSERT_TRUE(f) << f.error().to_string();
  // One Value per element was kCount * sizeof(Value) bytes (about 1.5 GB here); a span is none.
  std::printf("parse allocated %llu bytes in %llu allocations for a %llu-element u8 array (sizeof(Value) %zu)\n",
              static_cast<unsigned long long>(allocated), static_cast<unsigned long long>(allocations),
              static_cast<unsigned long long>(kCount), sizeof(Value));
  EXPECT_LT(allocated, 64u * 1024);
  EXPECT_LT(allocations, 64u);
  const Value* big = f->find("big.u8");
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(big->count, kCount);
  EXPECT_EQ(big->raw.size(), kCount);
  EXPECT_TRUE(big->items.empty());
  EXPECT_EQ(big->at(0).u, 0u);
  EXPECT_EQ(big->at(kCount - 1).u, static_cast<std::uint8_t>((kCount - 1) * 7));
  const Value* small = f->find("small.f32");
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(small->at(2).f, 3.25);
  EXPECT_EQ(small->at(2).type, ValueType::kF32);
}

TEST(GgufMemory, BoolArraysAreStillChecked) {
  testing::GgufBuilder b;
  testing::GgufBuilder::put_string(b.kv_bytes, "flags");
  append_le<std::uint32_t>(b.kv_bytes, 9);
  append_le<std::uint32_t>(b.kv_bytes, 7);
  append_le<std::uint64_t>(b.kv_bytes, 3);
  b.kv_bytes += std::string("\x01\x00\x02", 3);
  ++b.n_kv;
  auto f = File::parse(b.build(), "flags.gguf");
  ASSERT_FALSE(f);
  EXPECT_NE(f.error().message.find("'flags'[2]"), std::string::npos) << f.error().message;
}

}  // namespace
}  // namespace epk::layouts::gguf
