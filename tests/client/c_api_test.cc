// libepk's C ABI against the real epkd: results, error codes and messages, NULL arguments.
#include "client/epk.h"

#include <gtest/gtest.h>

#include <cstring>

#include "daemon/synthetic_source.h"
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
