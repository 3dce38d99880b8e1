// daemon/cache/fence_pool.h without a GPU: a fake MarkerSource stands for the CUDA events.
#include "daemon/cache/fence_pool.h"

#include <gtest/gtest.h>

#include <vector>

namespace epk::daemon {
namespace {

// Markers whose state the test sets; a fresh marker reads done (as a never-recorded CUDA event does).
class FakeMarkers : public MarkerSource {
 public:
  explicit FakeMarkers(std::vector<MarkerState>* states, int* made) : states_(states), made_(made) {}
  Status make(std::size_t index) override {
    if (index != states_->size()) return make_error(ErrorCode::kInternal, "markers made out of order");
    states_->push_back(MarkerState::kDone);
    ++*made_;
    return {};
  }
  MarkerState query(std::size_t index) override { return (*states_)[index]; }
  std::string last_error() const override { return "fake failure"; }

 private:
  std::vector<MarkerState>* states_;
  int* made_;
};

class FencePoolTest : public ::testing::Test {
 protected:
  std::shared_ptr<FencePool> pool(std::size_t capacity) {
    return FencePool::create(std::make_unique<FakeMarkers>(&states_, &made_), capacity, "test device");
  }
  // take(), then "record" (the marker's state becomes `st`) and arm().
  std::unique_ptr<FencePool::Fence> armed(FencePool& p, MarkerState st = MarkerState::kPending) {
    auto f = p.take();
    EXPECT_TRUE(f) << f.error().to_string();
    if (!f) return nullptr;
    states_[(*f)->index()] = st;
    (*f)->arm();
    return std::move(*f);
  }
  std::vector<MarkerState> states_;
  int made_ = 0;
};

TEST_F(FencePoolTest, MarkersAreMadeOnDemandAndReusedOnceGivenBack) {
  auto p = pool(8);
  EXPECT_EQ(p->made(), 0u);
  auto a = armed(*p);
  auto b = armed(*p);
  ASSERT_TRUE(a && b);
  EXPECT_NE(a->index(), b->index());
  EXPECT_EQ(made_, 2);
  const std::size_t ia = a->index();
  a.reset();  // given back
  auto c = armed(*p);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->index(), ia);
  EXPECT_EQ(made_, 2);
}

TEST_F(FencePoolTest, AFenceCompletesOnlyOnceArmedAndItsMarkerDone) {
  auto p = pool(4);
  auto f = p->take();
  ASSERT_TRUE(f);
  // A fresh marker reads done, but nothing was recorded for this release yet: not complete.
  EXPECT_FALSE((*f)->completed());
  states_[(*f)->index()] = MarkerState::kPending;
  (*f)->arm();
  EXPECT_FALSE((*f)->completed());
  EXPECT_EQ(p->pending(), 1u);
  states_[(*f)->index()] = MarkerState::kDone;
  EXPECT_TRUE((*f)->completed());
  EXPECT_EQ(p->pending(), 0u);
}

TEST_F(FencePoolTest, AFailedQueryNeverReadsCompleteNorIsReclaimed) {
  auto p = pool(1);
  auto f = armed(*p, MarkerState::kFailed);
  ASSERT_TRUE(f);
  EXPECT_FALSE(f->completed());
  EXPECT_FALSE(f->completed());  // logged once, still not complete
  EXPECT_EQ(p->pending(), 1u);
  auto g = p->take();
  ASSERT_FALSE(g);
  EXPECT_EQ(g.error().code, ErrorCode::kNoSpace);
  EXPECT_FALSE(f->completed());
}

TEST_F(FencePoolTest, AFullPoolReclaimsACompletedMarkerAndItsOldFenceStaysComplete) {
  auto p = pool(2);
  auto a = armed(*p);
  auto b = armed(*p);
  ASSERT_TRUE(a && b);
  auto none = p->take();  // both pending: a clear error, nothing waits
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, ErrorCode::kNoSpace);
  EXPECT_NE(none.error().message.find("test device"), std::string::npos) << none.error().message;
  states_[a->index()] = MarkerState::kDone;  // a's work is over, but the cache has not looked at a yet
  auto c = armed(*p);                        // takes a's marker and records it again (pending)
  ASSERT_TRUE(c);
  EXPECT_EQ(c->index(), a->index());
  EXPECT_EQ(made_, 2);
  EXPECT_TRUE(a->completed());   // the generation says: reclaimed, so complete; not c's pending record
  EXPECT_FALSE(c->completed());
  a.reset();  // a's late give-back must not free the marker c holds
  auto d = p->take();
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code, ErrorCode::kNoSpace);
  EXPECT_FALSE(c->completed());
  EXPECT_EQ(p->pending(), 2u);
}

TEST_F(FencePoolTest, AMarkerTakenButNotYetRecordedIsNotReclaimed) {
  auto p = pool(1);
  auto f = p->take();  // fresh: reads done, but unarmed (its taker is about to record it)
  ASSERT_TRUE(f);
  auto g = p->take();
  ASSERT_FALSE(g);
  EXPECT_EQ(g.error().code, ErrorCode::kNoSpace);
  EXPECT_FALSE((*f)->completed());
}

}  // namespace
}  // namespace epk::daemon
