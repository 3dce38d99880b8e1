// An acquire that does not fit while the budget is held by slots that come free by themselves (prefetches still
// decoding, released slots behind pending fences) waits for them instead of failing, and prefetch never takes the
// space an acquire waits for (issue 19). The real epkd on the CPU path; every wait is bounded.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "client/client.h"
#include "tests/daemon/epkd_harness.h"

namespace epk {
namespace {

using namespace epk::test_harness;  // NOLINT

// Eight 256x256 fp32 tensors (256 KiB each) in a 1 MiB budget: four fill it.
const char* kModel = "m=t0:256x256,t1:256x256,t2:256x256,t3:256x256,t4:256x256,t5:256x256,t6:256x256,t7:256x256";

TEST(EpkdSpace, PrefetchesThatFillTheBudgetDoNotMakeAnAcquireFail) {
  // Each decode takes 300 ms: the prefetched slots are still decoding when the acquire comes.
  Epkd d({"--synthetic", kModel, "--synthetic-delay-us", "300000", "--threads", "4"});
  auto c = d.connect(10000);
  ASSERT_TRUE(c) << c.error().to_string();
  auto queued = c->prefetch("m", {"t0", "t1", "t2", "t3", "t4", "t5"}, shm::Layout::kDenseF32);
  ASSERT_TRUE(queued) << queued.error().to_string();
  EXPECT_EQ(*queued, 4u);  // the budget holds four; the rest are dropped
  const auto t0 = Clock::now();
  auto t = c->acquire("m", "t7", shm::Layout::kDenseF32);
  ASSERT_TRUE(t) << "refused while only prefetches held the budget: " << t.error().to_string();
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(250));  // it waited for a prefetch's decode
  EXPECT_TRUE(c->release(t->handle));
  const auto s = d.stats();
  EXPECT_EQ(s.space_waits, 1u);
  EXPECT_GT(s.space_wait_ns, 0u);
  EXPECT_EQ(s.prefetches_dropped, 2u);
  EXPECT_EQ(d.terminate(), 0);
}

TEST(EpkdSpace, PinnedBytesPlusTheRequestOverTheBudgetAreRefusedAtOnceWithTheNumbers) {
  Epkd d({"--synthetic", kModel});
  auto c = d.connect(10000);
  ASSERT_TRUE(c);
  std::vector<client::Tensor> held;
  for (const char* name : {"t0", "t1", "t2", "t3"}) {
    auto t = c->acquire("m", name, shm::Layout::kDenseF32);
    ASSERT_TRUE(t) << t.error().to_string();
    held.push_back(*t);
  }
  const auto t0 = Clock::now();
  auto refused = c->acquire("m", "t4", shm::Layout::kDenseF32);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kNoSpace);
  EXPECT_NE(refused.error().message.find("1048576 pinned"), std::string::npos) << refused.error().message;
  EXPECT_NE(refused.error().message.find("pinned bytes plus the request exceed the budget"), std::string::npos)
      << refused.error().message;
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(500));  // nothing to wait for
  for (const auto& t : held) EXPECT_TRUE(c->release(t.handle));
  EXPECT_TRUE(c->acquire("m", "t4", shm::Layout::kDenseF32));
  EXPECT_EQ(d.stats().space_waits, 0u);
  EXPECT_EQ(d.terminate(), 0);
}

}  // namespace
}  // namespace epk
