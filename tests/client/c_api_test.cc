// libepk's C ABI against the real epkd: results, error codes and messages, NULL arguments.
#include "client/epk.h"

#include <gtest/gtest.h>

#include <cstring>

#include "daemon/sources/synthetic_source.h"
#include "tests/daemon/epkd_harness.h"

namespace epk {
namespace {

using test_harness::Epkd;

TEST(CApi, AcquireReleaseAndStats) {
  Epkd d({"--synthetic", "m=t0:3x5,w:7"});
  ASSERT_TRUE(d.running());
  epk_client* c = nullptr;
  ASSERT_EQ(epk_connect(d.socket().c_str(), &c), EPK_OK) << epk_last_error();
  ASSERT_NE(c, nullptr);
  epk_tensor t;
  ASSERT_EQ(epk_acquire(c, "m", "t0", "dense:bf16", &t), EPK_OK) << epk_last_error();
  EXPECT_EQ(t.ndim, 2u);
  EXPECT_EQ(t.shape[0], 3u);
  EXPECT_EQ(t.shape[1], 5u);
  EXPECT_EQ(t.strides[0], 5);
  EXPECT_EQ(t.strides[1], 1);
  EXPECT_EQ(t.bytes, 30u);
  EXPECT_EQ(t.dtype, static_cast<std::uint32_t>(DType::kBF16));
  std::uint16_t v;
  std::memcpy(&v, static_cast<const std::uint8_t*>(t.data) + 2 * 7, 2);
  EXPECT_EQ(v, daemon::f32_to_bf16(daemon::synthetic_value(0, 7)));
  epk_cache_stats s;
  ASSERT_EQ(epk_stats(c, &s), EPK_OK);
  EXPECT_EQ(s.pins, 1u);
  EXPECT_EQ(s.misses, 1u);
  std::size_t pools = 0;
  ASSERT_EQ(epk_pool_stats_get(c, NULL, 0, &pools), EPK_OK) << epk_last_error();
  EXPECT_EQ(pools, 1u);  // the host pool
  epk_pool_stats ps[2];
  ASSERT_EQ(epk_pool_stats_get(c, ps, 2, &pools), EPK_OK) << epk_last_error();
  ASSERT_EQ(pools, 1u);
  EXPECT_EQ(ps[0].device, -1);
  EXPECT_EQ(ps[0].pins, 1u);
  EXPECT_EQ(ps[0].used_bytes, s.used_bytes);
  EXPECT_EQ(ps[0].budget_bytes, s.budget_bytes);
  EXPECT_EQ(epk_pool_stats_get(c, NULL, 1, &pools), EPK_E_INVALID);
  epk_tensor other;
  EXPECT_EQ(epk_acquire_on(c, "m", "t0", "dense:bf16", 1, &other), EPK_E_NOT_FOUND);  // no device 1 on the host path
  ASSERT_EQ(epk_release(c, t.handle), EPK_OK);
  const char* names[] = {"w"};
  std::uint32_t queued = 99;
  ASSERT_EQ(epk_prefetch(c, "m", names, 1, NULL, &queued), EPK_OK);
  EXPECT_EQ(queued, 1u);
  epk_disconnect(c);
  EXPECT_EQ(d.terminate(), 0);
}

// Shards through the C ABI (a synthetic model: the source's default slicing): the slice's shape, strides and values;
// the resolution rule; prefetch of a shard; bad shards as EPK_E_INVALID with the daemon's message, the connection
// still serving (an unknown dim never reaches the wire).
TEST(CApi, ShardsAreSlicesAndBadOnesAreInvalid) {
  Epkd d({"--synthetic", "m=t0:3x5,w:7"});
  ASSERT_TRUE(d.running());
  epk_client* c = nullptr;
  ASSERT_EQ(epk_connect(d.socket().c_str(), &c), EPK_OK) << epk_last_error();
  epk_shard cols{EPK_SHARD_COLS, EPK_SHARD_RANGE, 1, 4};
  epk_tensor t;
  ASSERT_EQ(epk_acquire_shard(c, "m", "t0", "dense:bf16", 0, &cols, &t), EPK_OK) << epk_last_error();
  ASSERT_EQ(t.ndim, 2u);
  EXPECT_EQ(t.shape[0], 3u);
  EXPECT_EQ(t.shape[1], 3u);
  EXPECT_EQ(t.strides[0], 3);
  EXPECT_EQ(t.strides[1], 1);
  EXPECT_EQ(t.bytes, 18u);
  for (std::uint64_t r = 0; r < 3; ++r) {
    for (std::uint64_t k = 0; k < 3; ++k) {
      std::uint16_t v;
      std::memcpy(&v, static_cast<const std::uint8_t*>(t.data) + 2 * (r * 3 + k), 2);
      EXPECT_EQ(v, daemon::f32_to_bf16(daemon::synthetic_value(0, r * 5 + k + 1))) << r << "," << k;
    }
  }
  epk_shard rank{EPK_SHARD_ROWS, EPK_SHARD_SPLIT, 1, 2};  // rows [2, 3) of 3 by the ceil rule
  const std::uint64_t shape[2] = {3, 5};
  std::uint32_t axis = 9;
  std::uint64_t b = 0, e = 0;
  ASSERT_EQ(epk_shard_resolve(&rank, shape, 2, &axis, &b, &e), EPK_OK) << epk_last_error();
  EXPECT_EQ(axis, 0u);
  EXPECT_EQ(b, 2u);
  EXPECT_EQ(e, 3u);
  epk_tensor r1;
  ASSERT_EQ(epk_acquire_shard(c, "m", "t0", "dense:fp32", 0, &rank, &r1), EPK_OK) << epk_last_error();
  EXPECT_EQ(r1.shape[0], 1u);
  float f;
  std::memcpy(&f, static_cast<const std::uint8_t*>(r1.data) + 4 * 2, 4);
  EXPECT_EQ(f, daemon::synthetic_value(0, 2 * 5 + 2));
  epk_shard bad{EPK_SHARD_COLS, EPK_SHARD_RANGE, 4, 9};
  epk_tensor x;
  EXPECT_EQ(epk_acquire_shard(c, "m", "t0", "dense:bf16", 0, &bad, &x), EPK_E_INVALID);
  EXPECT_NE(std::strstr(epk_last_error(), "tensor 't0' of shape [3, 5]: shard cols [4, 9)"), nullptr)
      << epk_last_error();
  EXPECT_EQ(epk_shard_resolve(&bad, shape, 2, &axis, &b, &e), EPK_E_INVALID);
  epk_shard unknown{7, EPK_SHARD_RANGE, 0, 1};
  EXPECT_EQ(epk_acquire_shard(c, "m", "t0", "dense:bf16", 0, &unknown, &x), EPK_E_INVALID);
  EXPECT_NE(std::strstr(epk_last_error(), "shard dim 7"), nullptr) << epk_last_error();
  const char* names[] = {"w", "t0"};
  std::uint32_t queued = 99;
  epk_shard half{EPK_SHARD_ROWS, EPK_SHARD_SPLIT, 0, 2};
  ASSERT_EQ(epk_prefetch_shard(c, "m", names, 2, "dense:bf16", 0, &half, &queued), EPK_OK) << epk_last_error();
  EXPECT_EQ(queued, 2u);
  epk_cache_stats s;
  ASSERT_EQ(epk_stats(c, &s), EPK_OK);  // the connection still serves
  EXPECT_EQ(s.slots, 4u);                // cols [1, 4), rows [2, 3), and the two prefetched halves
  ASSERT_EQ(epk_release(c, t.handle), EPK_OK);
  ASSERT_EQ(epk_release(c, r1.handle), EPK_OK);
  epk_disconnect(c);
  EXPECT_EQ(d.terminate(), 0);
}

TEST(CApi, ErrorsAreCodesWithMessages) {
  Epkd d({"--synthetic", "m=t0:4"});
  ASSERT_TRUE(d.running());
  epk_client* c = nullptr;
  ASSERT_EQ(epk_connect(d.socket().c_str(), &c), EPK_OK);
  epk_tensor t;
  EXPECT_EQ(epk_acquire(c, "m", "missing", NULL, &t), EPK_E_NOT_FOUND);
  EXPECT_NE(std::strstr(epk_last_error(), "missing"), nullptr);
  EXPECT_EQ(epk_acquire(c, "nomodel", "t0", NULL, &t), EPK_E_NOT_FOUND);
  EXPECT_EQ(epk_acquire(c, "m", "t0", "dense:bogus", &t), EPK_E_INVALID);
  EXPECT_EQ(epk_acquire(c, "m", "t0", "rowwise:int8", &t), EPK_E_UNSUPPORTED);
  EXPECT_EQ(epk_release(c, 777), EPK_E_NOT_FOUND);
  EXPECT_EQ(epk_acquire(c, "m", "t0", "stored", &t), EPK_OK);  // the connection survived the errors
  epk_disconnect(c);
  EXPECT_EQ(d.terminate(), 0);
}

// The packed-layout part rule applied to a hand-made reply: GPTQ 4-bit, K 128 (padded), N 64, one group of 128.
TEST(CApi, TensorPartsFollowTheLayoutRule) {
  alignas(64) static std::uint8_t slot[4096 + 64 + 128 + 512];
  epk_tensor t;
  std::memset(&t, 0, sizeof(t));
  t.data = slot;
  t.bytes = sizeof(slot);
  t.dtype = static_cast<std::uint32_t>(DType::kF16);
  t.ndim = 8;
  const std::uint64_t shape[8] = {64, 128, 64, 128, 4, 128, 1, 1};
  std::memcpy(t.shape, shape, sizeof(shape));
  epk_part parts[4];
  size_t n = 0;
  ASSERT_EQ(epk_tensor_parts(&t, "gptq", parts, 4, &n), EPK_OK) << epk_last_error();
  ASSERT_EQ(n, 4u);
  EXPECT_STREQ(parts[0].name, "qweight");
  EXPECT_EQ(parts[0].data, slot);
  EXPECT_EQ(parts[0].shape[0], 16u);
  EXPECT_EQ(parts[0].shape[1], 64u);
  EXPECT_STREQ(parts[1].name, "qzeros");
  EXPECT_EQ(parts[1].data, slot + 4096);
  EXPECT_EQ(parts[1].bytes, 32u);
  EXPECT_STREQ(parts[2].name, "scales");
  EXPECT_EQ(parts[2].data, slot + 4096 + 64);  // 32 bytes of qzeros rounded up to 64
  EXPECT_EQ(parts[2].dtype, static_cast<std::uint32_t>(DType::kF16));
  EXPECT_STREQ(parts[3].name, "g_idx");
  EXPECT_EQ(parts[3].ndim, 1u);
  EXPECT_EQ(parts[3].shape[0], 128u);
  EXPECT_EQ(epk_tensor_parts(&t, "awq", parts, 4, &n), EPK_E_INVALID);  // AWQ has no g_idx part
  EXPECT_EQ(epk_tensor_parts(&t, "dense:bf16", parts, 4, &n), EPK_E_INVALID);
  t.bytes -= 1;  // the descriptor no longer describes the slot
  EXPECT_EQ(epk_tensor_parts(&t, "gptq", parts, 4, &n), EPK_E_INVALID);
  EXPECT_EQ(epk_tensor_parts(NULL, "gptq", parts, 4, &n), EPK_E_INVALID);
}

TEST(CApi, NullArgumentsAndNoDaemon) {
  epk_client* c = reinterpret_cast<epk_client*>(0x1);
  EXPECT_EQ(epk_connect("/nonexistent/epkd.sock", &c), EPK_E_IO);
  EXPECT_EQ(c, nullptr);
  EXPECT_NE(std::strlen(epk_last_error()), 0u);
  EXPECT_EQ(epk_connect(NULL, &c), EPK_E_INVALID);
  EXPECT_EQ(epk_connect("/x", NULL), EPK_E_INVALID);
  epk_tensor t;
  EXPECT_EQ(epk_acquire(NULL, "m", "t", NULL, &t), EPK_E_INVALID);
  EXPECT_EQ(epk_release(NULL, 1), EPK_E_INVALID);
  EXPECT_EQ(epk_stats(NULL, NULL), EPK_E_INVALID);
  EXPECT_EQ(epk_prefetch(NULL, "m", NULL, 0, NULL, NULL), EPK_E_INVALID);
  epk_disconnect(NULL);
}

TEST(CApi, DaemonGoneIsAnIoError) {
  Epkd d({"--synthetic", "m=t0:4"});
  ASSERT_TRUE(d.running());
  epk_client* c = nullptr;
  ASSERT_EQ(epk_connect(d.socket().c_str(), &c), EPK_OK);
  EXPECT_EQ(d.terminate(), 0);
  epk_tensor t;
  EXPECT_EQ(epk_acquire(c, "m", "t0", NULL, &t), EPK_E_IO);
  epk_disconnect(c);
}

}  // namespace
}  // namespace epk
