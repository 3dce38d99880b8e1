// shm/shard.h: the even-split rule, the resolution of shard requests and their errors, and the optional shard block
// of acquire and prefetch (shm/protocol.h rule 7): absent, the messages are byte for byte what they were.
#include "shm/shard.h"

#include <gtest/gtest.h>

#include <cstring>
#include <tuple>
#include <vector>

#include "shm/protocol.h"

namespace epk::shm {
namespace {

const std::vector<std::uint64_t> kShape{129, 67};

// torch.chunk's sizes, written as its documentation states them: chunks of ceil(n / k), the last one smaller, as
// many chunks as it takes.
std::vector<std::uint64_t> chunk_sizes(std::uint64_t n, std::uint64_t k) {
  std::vector<std::uint64_t> out;
  const std::uint64_t c = (n + k - 1) / k;
  for (std::uint64_t left = n; left > 0; left -= std::min(left, c)) out.push_back(std::min(left, c));
  return out;
}

TEST(Shard, SplitFollowsTheCeilRuleAndEqualsTheEvenSplitWhereItDivides) {
  for (std::uint64_t extent = 1; extent <= 70; ++extent) {
    for (std::uint64_t world = 1; world <= 9; ++world) {
      const auto sizes = chunk_sizes(extent, world);
      std::uint64_t at = 0;
      for (std::uint64_t rank = 0; rank < world; ++rank) {
        auto r = resolve_shard(ShardSpec::split(ShardDim::kRows, rank, world), std::vector<std::uint64_t>{extent, 3}, "w");
        if (rank >= sizes.size()) {  // past the last chunk: refused, never an empty slot
          ASSERT_FALSE(r) << extent << " over " << world << " rank " << rank;
          EXPECT_NE(r.error().message.find("empty"), std::string::npos) << r.error().message;
          continue;
        }
        ASSERT_TRUE(r) << r.error().to_string();
        EXPECT_EQ(r->begin, at);
        EXPECT_EQ(r->extent(), sizes[rank]);
        if (extent % world == 0) {
          EXPECT_EQ(r->extent(), extent / world);  // vLLM's / Megatron's divide()
        }
        at = r->end;
      }
      EXPECT_EQ(at, extent) << "the shares cover the extent";
    }
  }
}

TEST(Shard, RangesResolveAsGivenAndColumnsCutDimensionOne) {
  auto r = resolve_shard(ShardSpec::cols(5, 9), kShape, "w");
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, (ShardRange{ShardDim::kCols, 5, 9}));
  EXPECT_EQ(r->axis(), 1u);
  r = resolve_shard(ShardSpec::rows(128, 129), kShape, "w");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->axis(), 0u);
  EXPECT_EQ(r->extent(), 1u);
  r = resolve_shard(ShardSpec{}, kShape, "w");
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->whole());
  r = resolve_shard(ShardSpec::rows(1, 2), std::vector<std::uint64_t>{3}, "bias");  // 1-D: rows are elements
  ASSERT_TRUE(r);
}

TEST(Shard, BadShardsAreErrorsNamingTensorShapeAndRange) {
  struct Case {
    ShardSpec spec;
    std::vector<std::uint64_t> shape;
    const char* says;
  };
  const std::vector<Case> cases = {
      {ShardSpec::rows(0, 130), kShape, "past the tensor's 129 rows"},
      {ShardSpec::cols(60, 68), kShape, "past the tensor's 67 cols"},
      {ShardSpec::rows(5, 5), kShape, "empty or reversed"},
      {ShardSpec::rows(7, 3), kShape, "empty or reversed"},
      {ShardSpec::split(ShardDim::kRows, 0, 0), kShape, "world size 0"},
      {ShardSpec::split(ShardDim::kCols, 4, 4), kShape, "rank 4 is not below world size 4"},
      {ShardSpec::split(ShardDim::kRows, 3, 4), {5, 2}, "share is empty"},
      {ShardSpec::cols(0, 1), {3}, "1-D tensor has no columns"},
      {ShardSpec::rows(0, 1), {}, "scalar"},
      {ShardSpec{static_cast<ShardDim>(3), ShardForm::kRange, 0, 1}, kShape, "unknown shard dimension"},
      {ShardSpec{ShardDim::kRows, static_cast<ShardForm>(2), 0, 1}, kShape, "unknown shard form"},
  };
  for (const Case& c : cases) {
    auto r = resolve_shard(c.spec, c.shape, "model.layers.0.mlp.up_proj.weight");
    ASSERT_FALSE(r) << c.says;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    const std::string& m = r.error().message;
    EXPECT_NE(m.find("'model.layers.0.mlp.up_proj.weight'"), std::string::npos) << m;
    EXPECT_NE(m.find(c.says), std::string::npos) << m;
    if (c.shape == kShape) {
      EXPECT_NE(m.find("[129, 67]"), std::string::npos) << m;
    }
  }
  auto r = resolve_shard(ShardSpec::rows(0, 130), kShape, "w");
  EXPECT_NE(r.error().message.find("rows [0, 130)"), std::string::npos) << r.error().message;
}

TEST(ShardWire, AcquireWithoutAShardIsTheOldMessageAndWithOneRoundTrips) {
  std::vector<std::uint8_t> msg;
  AcquireRequest m{3, Layout::kDenseBF16, "layers.0.w", 1};
  encode_acquire(5, m, &msg);
  EXPECT_EQ(msg.size(), kHeaderSize + 4 + 4 + 2 + 10 + 4);  // no shard block
  auto whole = decode_acquire(std::span(msg).subspan(kHeaderSize));
  ASSERT_TRUE(whole);
  EXPECT_TRUE(whole->shard.whole());
  for (ShardSpec s : {ShardSpec::rows(3, 70), ShardSpec::cols(0, 1), ShardSpec::split(ShardDim::kCols, 2, 3)}) {
    m.shard = s;
    encode_acquire(5, m, &msg);
    EXPECT_EQ(msg.size(), kHeaderSize + 4 + 4 + 2 + 10 + 4 + 24);
    AcquireRequest fast, ref;
    fast.shard = ShardSpec::rows(1, 2);  // left over: the decode must overwrite it
    ASSERT_TRUE(decode_acquire(std::span(msg).subspan(kHeaderSize), &fast));
    ASSERT_TRUE(decode_acquire_checked(std::span(msg).subspan(kHeaderSize), &ref));
    EXPECT_EQ(fast.shard, s);
    EXPECT_EQ(ref.shard, s);
    EXPECT_EQ(fast.tensor, "layers.0.w");
  }
  // A whole acquire decoded into a request that held a shard comes out whole (the fast path resets it).
  m.shard = {};
  encode_acquire(5, m, &msg);
  AcquireRequest into;
  into.shard = ShardSpec::rows(1, 2);
  ASSERT_TRUE(decode_acquire(std::span(msg).subspan(kHeaderSize), &into));
  EXPECT_TRUE(into.shard.whole());
}

TEST(ShardWire, PrefetchCarriesOneShardForEveryName) {
  std::vector<std::uint8_t> msg;
  PrefetchRequest m{1, Layout::kDenseF32, {"a", "bb"}, 0, ShardSpec::split(ShardDim::kRows, 1, 2)};
  encode_prefetch(2, m, &msg);
  auto got = decode_prefetch(std::span(msg).subspan(kHeaderSize));
  ASSERT_TRUE(got) << got.error().to_string();
  EXPECT_EQ(got->shard, m.shard);
  EXPECT_EQ(got->tensors, m.tensors);
  m.shard = {};
  encode_prefetch(2, m, &msg);
  got = decode_prefetch(std::span(msg).subspan(kHeaderSize));
  ASSERT_TRUE(got);
  EXPECT_TRUE(got->shard.whole());
}

TEST(ShardWire, BadShardBlocksAreRefusedNamingTheField) {
  std::vector<std::uint8_t> msg;
  AcquireRequest m{3, Layout::kDenseBF16, "w", 0, ShardSpec::rows(0, 4)};
  encode_acquire(5, m, &msg);
  const std::size_t dim_at = msg.size() - 24, form_at = dim_at + 4;
  auto with = [&](std::size_t at, std::uint32_t v) {
    std::vector<std::uint8_t> p(msg.begin() + kHeaderSize, msg.end());
    std::memcpy(p.data() + at - kHeaderSize, &v, 4);
    return p;
  };
  for (auto [at, v, field] : {std::tuple{dim_at, 0u, "shard dim"}, std::tuple{dim_at, 3u, "shard dim"},
                              std::tuple{form_at, 2u, "shard form"}}) {
    auto p = with(at, v);
    auto r = decode_acquire(p);
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().message.find(field), std::string::npos) << r.error().message;
  }
  for (std::size_t cut = 1; cut < 24; cut += 5) {  // a truncated block
    std::vector<std::uint8_t> p(msg.begin() + kHeaderSize, msg.end() - static_cast<std::ptrdiff_t>(cut));
    EXPECT_FALSE(decode_acquire(p)) << cut;
  }
}

}  // namespace
}  // namespace epk::shm
