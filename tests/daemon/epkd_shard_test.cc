// Tensor-parallel shards through the real epkd on the CPU path (--cpu, host pools): every shard of every layout
// equals the same slice of the whole tensor bit for bit; the budget counts shard bytes; shards are cache entries of
// their own (keyed by the resolved range); bad shards are clear errors and the session goes on; packed integer
// layouts shard along their packing rules (and refuse a boundary they cannot take, naming it); prefetch takes a shard.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "codec/layouts/convert.h"
#include "daemon/cache/slot_allocator.h"
#include "tests/daemon/epkd_harness.h"
#include "tests/daemon/epkd_shard_checks.h"
#include "tests/support/scratch_dir.h"

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
    dir_ = epk::test::test_scratch_dir("epkd_shard");
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
  auto c = d.connect();
  ASSERT_TRUE(c) << c.error().to_string();
  const int n = check_every_shard(*c, "m");
  EXPECT_GT(n, 700);
  std::printf("shards checked: %d\n", n);
  EXPECT_EQ(d.terminate(), 0);
}

TEST_F(EpkdShard, TheBudgetCountsTheShardsBytes) {
  Epkd d({"--model", "m=" + path_}, "4");
  auto c = d.connect();
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
  auto c = d.connect();
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
  auto c = d.connect();
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
  // A packed layout refuses a boundary its packing cannot take, naming it; the session still serves.
  auto g = c->acquire("m", "q.s", shm::Layout::kAwq, 0, ShardSpec::cols(0, 100));
  ASSERT_FALSE(g);
  EXPECT_EQ(g.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(g.error().message.find("inside a group of 64 input features"), std::string::npos) << g.error().message;
  EXPECT_NE(g.error().message.find("awq"), std::string::npos) << g.error().message;
  EXPECT_NE(g.error().message.find("q.s"), std::string::npos) << g.error().message;
  g = c->acquire("m", "q.p", shm::Layout::kGptq, 0, ShardSpec::cols(0, 64));
  ASSERT_FALSE(g);
  EXPECT_NE(g.error().message.find("(a perm)"), std::string::npos) << g.error().message;
  auto ok = c->acquire("m", "lin.a", shm::Layout::kDenseBF16, 0, ShardSpec::rows(0, 1));
  ASSERT_TRUE(ok) << ok.error().to_string();
  EXPECT_EQ(ok->shape, (std::vector<std::uint64_t>{1, 67}));
  auto s = c->stats();
  EXPECT_EQ(s->slots, 1u);  // the refusals made no slot
  EXPECT_EQ(d.terminate(), 0);
}

// Packed integer layouts: a shard's parts are the whole layout's parts cut at the same pack and group boundaries
// (gptq columns = output features: qweight and scales columns, qzeros' packed columns, g_idx whole; gptq rows =
// input features: qweight's packed rows and their g_idx, the static groups they cover or every act-order group;
// awq likewise); marlin (tile-interleaved) equals the CPU writer's output for the cut written by hand here.
struct Part2 {
  std::vector<std::uint64_t> shape;
  const std::uint8_t* data = nullptr;
  std::size_t elem = 4;
};
Part2 part_of(const client::Tensor& t, std::string_view name) {
  for (const auto& p : t.parts) {
    if (p.name == name) return {p.shape, static_cast<const std::uint8_t*>(p.data), std::size_t(dtype_bits(p.dtype) / 8)};
  }
  ADD_FAILURE() << "no part " << name;
  return {};
}
// Rows [r0, r1) and columns [c0, c1) of a part (a 1-D part: rows only).
std::vector<std::uint8_t> cut2(const Part2& p, std::uint64_t r0, std::uint64_t r1, std::uint64_t c0, std::uint64_t c1) {
  if (p.data == nullptr) return {};
  const std::uint64_t cols = p.shape.size() > 1 ? p.shape[1] : 1;
  std::vector<std::uint8_t> out;
  for (std::uint64_t r = r0; r < r1; ++r) {
    const std::uint8_t* row = p.data + (r * cols + c0) * p.elem;
    out.insert(out.end(), row, row + (c1 - c0) * p.elem);
  }
  return out;
}
std::vector<std::uint8_t> all_of(const Part2& p) {
  if (p.data == nullptr) return {};
  return cut2(p, 0, p.shape[0], 0, p.shape.size() > 1 ? p.shape[1] : 1);
}

TEST_F(EpkdShard, PackedLayoutsShardAlongTheirPackingRules) {
  Epkd d({"--model", "m=" + path_}, "8");
  auto c = d.connect();
  ASSERT_TRUE(c);
  auto get = [&](const std::string& name, shm::Layout l, ShardSpec s) {
    auto t = c->acquire("m", name, l, 0, s);
    EXPECT_TRUE(t) << name << " " << shm::describe(s) << ": " << t.error().to_string();
    return t ? *t : client::Tensor{};
  };
  const auto gptq = shm::Layout::kGptq, awq = shm::Layout::kAwq;
  // gptq, output features [64, 160) of act-order q.w (N 192, K 256): 4-bit codes, 8 per qzeros word.
  {
    auto whole = get("q.w", gptq, {}), t = get("q.w", gptq, ShardSpec::rows(64, 160));
    EXPECT_EQ(t.shape[0], 96u);  // the descriptor: N, K, ...
    EXPECT_EQ(t.shape[1], 256u);
    auto wq = part_of(whole, "qweight"), wz = part_of(whole, "qzeros"), ws = part_of(whole, "scales");
    EXPECT_EQ(all_of(part_of(t, "qweight")), cut2(wq, 0, wq.shape[0], 64, 160));
    EXPECT_EQ(all_of(part_of(t, "qzeros")), cut2(wz, 0, wz.shape[0], 8, 20));
    EXPECT_EQ(all_of(part_of(t, "scales")), cut2(ws, 0, ws.shape[0], 64, 160));
    EXPECT_EQ(all_of(part_of(t, "g_idx")), all_of(part_of(whole, "g_idx")));
  }
  // gptq, input features [64, 192) of act-order q.w: qweight's packed rows [8, 24), g_idx rows [64, 192), every
  // group's scales and zeros.
  {
    auto whole = get("q.w", gptq, {}), t = get("q.w", gptq, ShardSpec::split(ShardDim::kCols, 1, 2));
    EXPECT_EQ(t.shape[1], 128u);
    auto wq = part_of(whole, "qweight"), wg = part_of(whole, "g_idx");
    EXPECT_EQ(all_of(part_of(t, "qweight")), cut2(wq, 16, 32, 0, wq.shape[1]));
    EXPECT_EQ(all_of(part_of(t, "g_idx")), cut2(wg, 128, 256, 0, 1));
    EXPECT_EQ(all_of(part_of(t, "scales")), all_of(part_of(whole, "scales")));
    EXPECT_EQ(all_of(part_of(t, "qzeros")), all_of(part_of(whole, "qzeros")));
  }
  // Static groups of 64 (q.s: N 128, K 256, asymmetric with zero points of 0: gptq-v2, as gptq v1 cannot store
  // them): input features [64, 192) take groups [1, 3) and g_idx k / 64.
  const auto gptq2 = shm::Layout::kGptqV2;
  for (auto l : {gptq2, awq}) {
    SCOPED_TRACE(std::string(shm::layout_name(l)));
    auto whole = get("q.s", l, {}), t = get("q.s", l, ShardSpec::cols(64, 192));
    auto wq = part_of(whole, "qweight"), wz = part_of(whole, "qzeros"), ws = part_of(whole, "scales");
    const std::uint64_t q0 = l == gptq2 ? 8 : 64, q1 = l == gptq2 ? 24 : 192;  // gptq packs K 8 per word, awq N
    EXPECT_EQ(all_of(part_of(t, "qweight")), cut2(wq, q0, q1, 0, wq.shape[1]));
    EXPECT_EQ(all_of(part_of(t, "qzeros")), cut2(wz, 1, 3, 0, wz.shape[1]));
    EXPECT_EQ(all_of(part_of(t, "scales")), cut2(ws, 1, 3, 0, ws.shape[1]));
    if (l == gptq2) {
      auto tg = part_of(t, "g_idx");
      for (std::uint64_t k = 0; k < 128; ++k) {
        std::int32_t v;
        std::memcpy(&v, tg.data + 4 * k, 4);
        EXPECT_EQ(v, static_cast<std::int32_t>(k / 64)) << k;
      }
    }
    // Output features [32, 96): awq packs N 8 per word (qweight and qzeros columns [4, 12)).
    auto n = get("q.s", l, ShardSpec::rows(32, 96));
    auto nq = part_of(n, "qweight");
    EXPECT_EQ(all_of(nq), l == gptq2 ? cut2(wq, 0, wq.shape[0], 32, 96) : cut2(wq, 0, wq.shape[0], 4, 12));
    EXPECT_EQ(all_of(part_of(n, "scales")), cut2(ws, 0, ws.shape[0], 32, 96));
  }
  // gptq-v2 takes a static tensor's boundary inside a group (g_idx carries it): every group, g_idx rows [0, 100).
  {
    auto whole = get("q.s", gptq2, {}), t = get("q.s", gptq2, ShardSpec::cols(0, 100));
    auto wg = part_of(whole, "g_idx");
    auto tg = part_of(t, "g_idx");
    EXPECT_EQ(tg.shape[0], 104u);  // gptq packs 8 input features a word: the layout pads the shard's 100 to 104
    EXPECT_EQ(cut2(tg, 0, 100, 0, 1), cut2(wg, 0, 100, 0, 1));
    EXPECT_EQ(all_of(part_of(t, "scales")), all_of(part_of(whole, "scales")));
  }
  // marlin (tile-interleaved): the CPU writer's output for the cut written here, output features [64, 128).
  {
    layouts::QuantTensor q = act_order_intq(), cut = q;
    cut.cols = cut.padded_cols = 64;
    cut.codes.assign(static_cast<std::size_t>(q.padded_rows * 64), 0);
    cut.scales.assign(static_cast<std::size_t>(q.num_groups * 64), 0.0f);
    cut.zeros.assign(static_cast<std::size_t>(q.num_groups * 64), 0);
    for (std::int64_t k = 0; k < q.padded_rows; ++k) {
      for (std::int64_t n = 0; n < 64; ++n) cut.codes[k * 64 + n] = q.codes[k * q.padded_cols + 64 + n];
    }
    for (std::int64_t g = 0; g < q.num_groups; ++g) {
      for (std::int64_t n = 0; n < 64; ++n) {
        cut.scales[g * 64 + n] = q.scales[g * q.padded_cols + 64 + n];
        cut.zeros[g * 64 + n] = q.zeros[g * q.padded_cols + 64 + n];
      }
    }
    auto want = layouts::write_layout(cut, layouts::Layout::kMarlin);
    ASSERT_TRUE(want) << want.error().to_string();
    auto t = get("q.w", shm::Layout::kMarlin, ShardSpec::rows(64, 128));
    ASSERT_EQ(t.parts.size(), want->tensors.size());
    for (std::size_t i = 0; i < t.parts.size(); ++i) {
      ASSERT_EQ(t.parts[i].bytes, want->tensors[i].bytes.size()) << want->tensors[i].name;
      EXPECT_EQ(std::memcmp(t.parts[i].data, want->tensors[i].bytes.data(), t.parts[i].bytes), 0)
          << want->tensors[i].name;
    }
  }
  EXPECT_EQ(d.terminate(), 0);
}

TEST_F(EpkdShard, PrefetchTakesAShard) {
  Epkd d({"--model", "m=" + path_}, "4");
  auto c = d.connect();
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
