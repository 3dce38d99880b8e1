// shm/cuda_event.h: the RAII owners of events, streams and buffers. Skips without a CUDA device; on the H200 it runs
// from scripts/gpu/epkd_gpu_check.sh.
#include "shm/cuda_event.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "shm/device_pool.h"

namespace epk::shm {
namespace {

class CudaResources : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_device_available(0)) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(CudaResources, InterprocessEventHasAHandleAndCompletesAfterItsStream) {
  auto ev = CudaEvent::create_interprocess(0);
  ASSERT_TRUE(ev) << ev.error().to_string();
  auto h = ev->ipc_handle();
  ASSERT_TRUE(h) << h.error().to_string();
  EXPECT_NE(std::accumulate(h->begin(), h->end(), 0u), 0u);
  auto s = CudaStream::create(0);
  ASSERT_TRUE(s) << s.error().to_string();
  ASSERT_TRUE(ev->record(s->get()));
  ASSERT_TRUE(s->synchronize());
  EXPECT_TRUE(ev->query());
  ASSERT_TRUE(s->wait(ev->get()));  // waiting on a completed event is a no-op
  EXPECT_TRUE(s->synchronize());
}

TEST_F(CudaResources, MoveLeavesTheSourceEmpty) {
  auto ev = CudaEvent::create_interprocess(0);
  ASSERT_TRUE(ev);
  CudaEvent a = std::move(*ev);
  EXPECT_TRUE(static_cast<bool>(a));
  EXPECT_FALSE(static_cast<bool>(*ev));  // NOLINT(bugprone-use-after-move): checking the moved-from state
  CudaEvent b;
  b = std::move(a);
  EXPECT_TRUE(static_cast<bool>(b));
  EXPECT_FALSE(static_cast<bool>(a));  // NOLINT(bugprone-use-after-move)
}

TEST_F(CudaResources, PinnedAndDeviceBuffersRoundTripOnAStream) {
  auto s = CudaStream::create(0);
  ASSERT_TRUE(s);
  const std::uint64_t n = 1000003;  // odd size
  auto host = PinnedBuffer::alloc(n, 0);
  auto dev = DeviceBuffer::alloc(n, 0);
  ASSERT_TRUE(host && dev);
  for (std::uint64_t i = 0; i < n; ++i) host->data()[i] = static_cast<std::uint8_t>(i * 131 + 7);
  ASSERT_TRUE(copy_to_device_async(dev->address(), host->data(), n, s->get(), 0));
  ASSERT_TRUE(fill_device_async(dev->address() + 10, 0xEE, 5, s->get(), 0));
  std::vector<std::uint8_t> back(n);
  ASSERT_TRUE(copy_from_device_async(back.data(), dev->address(), n, s->get(), 0));
  ASSERT_TRUE(s->synchronize());
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint8_t want = i >= 10 && i < 15 ? 0xEE : static_cast<std::uint8_t>(i * 131 + 7);
    ASSERT_EQ(back[i], want) << i;
  }
}

}  // namespace
}  // namespace epk::shm
