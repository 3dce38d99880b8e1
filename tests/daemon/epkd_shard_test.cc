// Tensor-parallel shards through the real epkd on the CPU path (--cpu, host pools): every shard of every layout
// equals the same slice of the whole tensor bit for bit; the budget counts shard bytes; shards are cache entries of
// their own (keyed by the resolved range); bad shards are clear errors and the session goes on; packed integer
// layouts refuse shards by name; prefetch takes a shard.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "daemon/slot_allocator.h"
#include "tests/daemon/epkd_harness.h"
#include "tests/daemon/epkd_shard_checks.h"

namespace epk {
namespace {

namespace fs = std::filesystem;
using namespace epk::test_harness;  // NOLINT
using namespace epk::shard_checks;  // NOLINT
using shm::ShardDim;
using shm::ShardSpec;

class EpkdShard : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("epkd_shard_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "m.epk").string();
    Status st = write_model(path_);
    ASSERT_TRUE(st) << st.error().to_string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
  std::string path_;
};

TEST_F(EpkdShard, EveryShardOfEveryLayoutIsTheSliceOfTheWholeTensor) {
  Epkd d({"--model", "m=" + path_}, "16");
  ASSERT_TRUE(d.running());
  auto c = Client::connect(d.socket());
  ASSERT_TRUE(c) << c.error().to_string();
  const int n = check_every_shard(*c, "m");
  EXPECT_GT(n, 700);
  std::printf("shards checked: %d\n", n);
  EXPECT_EQ(d.terminate(), 0);
}

TEST_F(EpkdShard, TheBudgetCountsTheShardsBytes) {
  Epkd d({"--model", "m=" + path_}, "4");
  ASSERT_TRUE(d.running());
  auto c = Client::connect(d.socket());
  ASSERT_TRUE(c);
  // Rank 1 of 3 of lin.b's 200 rows: rows [67, 134), 67 x 300 bf16.
  auto t = c->acquire("m", "lin.b", shm::Layout::kDenseBF16, 0, ShardSpec::split(ShardDim::kRows, 1, 3));
  ASSERT_TRUE(t) << t.error().to_string();
  EXPECT_EQ(t->bytes, 67u * 300 * 2);
  auto s = c->stats();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->used_bytes, daemon::SlotAllocator::rounded(67u * 300 * 2));
  ASSERT_EQ(s->pools.size(), 1u);
  EXPECT_EQ(s->pools[0].used_bytes, s->used_bytes);
  EXPECT_EQ(s->pools[0].pinned_bytes, s->used_bytes);
  // A column shard: every row, its columns only.
  auto col = c->acquire("m", "lin.b", shm::Layout::kDenseF32, 0, ShardSpec::cols(10, 35));
  ASSERT_TRUE(col) << col.error().to_string();
  EXPECT_EQ(col->bytes, 200u * 25 * 4);
  s = c->stats();
  EXPECT_EQ(s->used_bytes, daemon::SlotAllocator::rounded(67u * 300 * 2) + daemon::SlotAllocator::rounded(200u * 25 * 4));
  auto models = c->models();
  ASSERT_TRUE(models);
  ASSERT_EQ(models->models.size(), 1u);
  EXPECT_EQ(models->models[0].cached_slots, 2u);
  EXPECT_EQ(d.terminate(), 0);
}

TEST_F(EpkdShard, ShardsAreCacheEntriesOfTheirOwnKeyedByTheResolvedRange) {
  Epkd d({"--model", "m=" + path_}, "4");
  ASSERT_TRUE(d.running());
  auto c = Client::connect(d.socket());
  ASSERT_TRUE(c);
  const auto l = shm::Layout::kDenseBF16;
  auto r0 = c->acquire("m", "lin.a", l, 0, ShardSpec::split(ShardDim::kRows, 0, 2));  // [0, 65)
  auto r1 = c->acquire("m", "lin.a", l, 0, ShardSpec::split(ShardDim::kRows, 1, 2));  // [65, 129)
  auto whole = c->acquire("m", "lin.a", l);
  ASSERT_TRUE(r0 && r1 && whole);
  EXPECT_NE(r0->handle, r1->handle);
  EXPECT_NE(r0->handle, whole->handle);
  auto s = c->stats();
  EXPECT_EQ(s->slots, 3u);
  EXPECT_EQ(s->misses, 3u);
  EXPECT_EQ(s->hits, 0u);
  // The same rows asked as a range: the same slot (a hit), whatever the spelling.
  auto again = c->acquire("m", "lin.a", l, 0, ShardSpec::rows(0, 65));
  ASSERT_TRUE(again);
  EXPECT_EQ(again->handle, r0->handle);
  // A column shard of the same extent is another slot.
  auto cols = c->acquire("m", "lin.a", l, 0, ShardSpec::cols(0, 65));
  ASSERT_TRUE(cols) << cols.error().to_string();
  EXPECT_NE(cols->handle, r0->handle);
  s = c->stats();
  EXPECT_EQ(s->slots, 4u);
  EXPECT_EQ(s->hits, 1u);
  EXPECT_EQ(d.terminate(), 0);
}

TEST_F(EpkdShard, BadShardsAreClearErrorsAndTheSessionGoesOn) {
  Epkd d({"--model", "m=" + path_}, "4");
  ASSERT_TRUE(d.running());
  auto c = Client::connect(d.socket());
  ASSERT_TRUE(c);
  struct Case {
    std::string tensor;
    ShardSpec spec;
    const char* says;
  };
  for (const Case& k : std::vector<Case>{
           {"lin.a", ShardSpec::rows(100, 130), "tensor 'lin.a' of shape [129, 67]: shard rows [100, 130): range ends past the tensor's 129 rows"},
           {"lin.a", ShardSpec::cols(9, 9), "shard cols [9, 9): empty or reversed range"},
           {"raw.bias", ShardSpec::cols(0, 2), "a 1-D tensor has no columns"},
           {"lin.a", ShardSpec::split(ShardDim::kRows, 2, 2), "rank 2 is not below world size 2"},
           {"raw.w", ShardSpec::split(ShardDim::kCols, 3, 4), "rank 3's share is empty"},
       }) {
    auto t = c->acquire("m", k.tensor, shm::Layout::kStored, 0, k.spec);
    ASSERT_FALSE(t) << k.says;
    EXPECT_EQ(t.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(t.error().message.find(k.says), std::string::npos) << t.error().message;
    EXPECT_NE(t.error().message.find("model 'm'"), std::string::npos) << t.error().message;
  }
  // Packed integer layouts refuse shards, naming the layout; the session still serves.
  auto g = c->acquire("m", "q.w", shm::Layout::kGptq, 0, ShardSpec::split(ShardDim::kRows, 0, 2));
  ASSERT_FALSE(g);
  EXPECT_EQ(g.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(g.error().message.find("gptq"), std::string::npos) << g.error().message;
  EXPECT_NE(g.error().message.find("q.w"), std::string::npos) << g.error().message;
  auto ok = c->acquire("m", "lin.a", shm::Layout::kDenseBF16, 0, ShardSpec::rows(0, 1));
  ASSERT_TRUE(ok) << ok.error().to_string();
  EXPECT_EQ(ok->shape, (std::vector<std::uint64_t>{1, 67}));
  auto s = c->stats();
  EXPECT_EQ(s->slots, 1u);  // the refusals made no slot
  EXPECT_EQ(d.terminate(), 0);
}

TEST_F(EpkdShard, PrefetchTakesAShard) {
  Epkd d({"--model", "m=" + path_}, "4");
  ASSERT_TRUE(d.running());
  auto c = Client::connect(d.socket());
  ASSERT_TRUE(c);
  const ShardSpec spec = ShardSpec::split(ShardDim::kCols, 1, 3);
  auto q = c->prefetch("m", {"lin.a", "lin.b", "raw.bias"}, shm::Layout::kDenseBF16, 0, spec);
  ASSERT_TRUE(q) << q.error().to_string();
  EXPECT_EQ(*q, 2u);  // raw.bias has no columns: skipped, as an unknown name is
  auto t = c->acquire("m", "lin.b", shm::Layout::kDenseBF16, 0, spec);
  ASSERT_TRUE(t) << t.error().to_string();
  EXPECT_EQ(t->shape, (std::vector<std::uint64_t>{200, 100}));
  auto s = c->stats();
  EXPECT_EQ(s->slots, 2u);  // the acquire found the prefetched slot
  EXPECT_EQ(s->prefetches, 2u);
  EXPECT_EQ(d.terminate(), 0);
}

}  // namespace
}  // namespace epk
