// PhasedTeam: every member runs its share of every phase once, the step between phases sees the whole phase done
// and none of the next one started, a false from it skips the later shares and is returned, the team serves run
// after run (also after a stopped one), before() runs once per run on each started thread, and a one-member team
// runs everything on the caller.
#include "codec/common/phased_team.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace epk {
namespace {

// Counts of each phase's shares, and what between() saw of them.
struct Record {
  explicit Record(std::size_t phases, int members)
      : shares(phases + 1), seen_members(members), by_member(phases * std::size_t(members)) {
    for (auto& a : shares) a = 0;
    for (auto& a : by_member) a = 0;
  }
  std::vector<std::atomic<int>> shares;
  int seen_members;
  std::vector<std::atomic<int>> by_member;
  std::vector<std::size_t> between_order;
  int bad_between = 0;
};

TEST(PhasedTeam, EveryShareOncePerPhaseAndBetweenSeesThePhaseWhole) {
  for (int members : {1, 2, 5, 16}) {
    PhasedTeam team(members);
    ASSERT_EQ(team.members(), members);
    const std::size_t phases = 37;
    Record r(phases, members);
    const bool ok = team.run(
        phases,
        [&](std::size_t p, int m) {
          ++r.shares[p];
          ++r.by_member[p * std::size_t(members) + std::size_t(m)];
        },
        [&](std::size_t p) {
          if (r.shares[p] != members || r.shares[p + 1] != 0) ++r.bad_between;
          r.between_order.push_back(p);
          return true;
        });
    EXPECT_TRUE(ok);
    EXPECT_EQ(r.bad_between, 0) << members << " members";
    ASSERT_EQ(r.between_order.size(), phases);
    for (std::size_t p = 0; p < phases; ++p) {
      EXPECT_EQ(r.between_order[p], p);
      for (int m = 0; m < members; ++m) EXPECT_EQ(r.by_member[p * std::size_t(members) + std::size_t(m)], 1);
    }
  }
}

TEST(PhasedTeam, AFalseBetweenSkipsTheLaterSharesAndIsReturned) {
  PhasedTeam team(4);
  std::atomic<int> shares{0};
  int betweens = 0;
  const bool ok = team.run(
      6, [&](std::size_t, int) { ++shares; },
      [&](std::size_t p) {
        ++betweens;
        return p != 2;
      });
  EXPECT_FALSE(ok);
  EXPECT_EQ(shares, 3 * 4) << "phases 0, 1 and 2 ran, 3 to 5 did not";
  EXPECT_EQ(betweens, 3);
  // The team serves the next run whole.
  shares = 0;
  EXPECT_TRUE(team.run(
      5, [&](std::size_t, int) { ++shares; }, [](std::size_t) { return true; }));
  EXPECT_EQ(shares, 5 * 4);
}

TEST(PhasedTeam, RunAfterRunIncludingEmptyOnes) {
  PhasedTeam team(6);
  for (std::size_t run = 0; run < 300; ++run) {
    const std::size_t phases = run % 5;  // 0 included: nothing runs
    std::atomic<std::size_t> sum{0};
    std::size_t betweens = 0;
    ASSERT_TRUE(team.run(
        phases, [&](std::size_t p, int m) { sum += p * 10 + std::size_t(m); },
        [&](std::size_t) {
          ++betweens;
          return true;
        }));
    std::size_t want = 0;
    for (std::size_t p = 0; p < phases; ++p)
      for (int m = 0; m < 6; ++m) want += p * 10 + std::size_t(m);
    ASSERT_EQ(sum, want) << "run " << run;
    ASSERT_EQ(betweens, phases) << "run " << run;
  }
}

TEST(PhasedTeam, BeforeRunsOnceOnEachStartedThreadPerRun) {
  PhasedTeam team(5);
  for (int run = 0; run < 20; ++run) {
    std::mutex mu;
    std::set<std::thread::id> before_on, share_on;
    int befores = 0;
    ASSERT_TRUE(team.run(
        3,
        [&](std::size_t, int) {
          std::lock_guard<std::mutex> lock(mu);
          share_on.insert(std::this_thread::get_id());
        },
        [](std::size_t) { return true; },
        [&] {
          std::lock_guard<std::mutex> lock(mu);
          ++befores;
          before_on.insert(std::this_thread::get_id());
        }));
    EXPECT_EQ(befores, 4) << "once on each of the 4 started threads";
    EXPECT_EQ(before_on.size(), 4u);
    EXPECT_EQ(share_on.size(), 5u) << "the caller and the 4 threads";
    EXPECT_EQ(before_on.count(std::this_thread::get_id()), 0u) << "not on the caller";
  }
}

TEST(PhasedTeam, OneMemberRunsOnTheCaller) {
  PhasedTeam team(0);  // below 1: one member
  ASSERT_EQ(team.members(), 1);
  std::set<std::thread::id> on;
  ASSERT_TRUE(team.run(
      4,
      [&](std::size_t, int m) {
        on.insert(std::this_thread::get_id());
        EXPECT_EQ(m, 0);
      },
      [&](std::size_t) {
        on.insert(std::this_thread::get_id());
        return true;
      }));
  EXPECT_EQ(on, std::set<std::thread::id>{std::this_thread::get_id()});
}

}  // namespace
}  // namespace epk
