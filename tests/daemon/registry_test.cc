#include "daemon/service/registry.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "daemon/sources/synthetic_source.h"

namespace epk::daemon {
namespace {

std::shared_ptr<const ModelSource> synthetic(const std::string& spec) {
  auto s = SyntheticSource::create(spec, std::chrono::microseconds(0));
  EXPECT_TRUE(s) << s.error().to_string();
  return std::shared_ptr<const ModelSource>(std::move(*s));
}

TEST(Registry, AddFindGet) {
  Registry r;
  EXPECT_EQ(r.get(0), nullptr);
  auto a = r.add("a", synthetic("3x5"));
  ASSERT_TRUE(a) << a.error().to_string();
  auto b = r.add("b", synthetic("w:7,q:2x3"));
  ASSERT_TRUE(b) << b.error().to_string();
  EXPECT_EQ(*a, 0u);
  EXPECT_EQ(*b, 1u);
  EXPECT_EQ(r.size(), 2u);
  EXPECT_EQ(r.find("b"), std::optional<std::uint32_t>(1));
  EXPECT_FALSE(r.find("c"));
  ASSERT_NE(r.get(1), nullptr);
  EXPECT_EQ(r.get(1)->name, "b");
  EXPECT_EQ(r.get(1)->tensor_index.count("q"), 1u);
  EXPECT_EQ(r.get(2), nullptr);
  EXPECT_EQ(r.get(0xffffffffu), nullptr);
}

TEST(Registry, RefusesATakenOrEmptyName) {
  Registry r;
  ASSERT_TRUE(r.add("a", synthetic("3x5")));
  auto again = r.add("a", synthetic("3x5"));
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::kInvalidArgument);
  EXPECT_FALSE(r.add("", synthetic("3x5")));
  EXPECT_EQ(r.size(), 1u);
}

// Retiring frees the name for a new generation under a fresh id; the old entry stays readable (a tombstone once its
// source is released), and ids are never reused.
TEST(Registry, RetireFreesTheNameAndReleaseTakesTheSource) {
  Registry r;
  ASSERT_TRUE(r.add("a", synthetic("3x5")));
  ASSERT_TRUE(r.add("b", synthetic("2x2")));
  EXPECT_FALSE(r.release_source(0));  // not retired: kept
  EXPECT_TRUE(r.retire(0, "removed"));
  EXPECT_FALSE(r.retire(0, "again"));
  EXPECT_FALSE(r.find("a"));
  EXPECT_TRUE(r.get(0)->retired.load());
  EXPECT_EQ(r.get(0)->retired_because, "removed");
  auto again = r.add("a", synthetic("4x4"));
  ASSERT_TRUE(again) << again.error().to_string();
  EXPECT_EQ(*again, 2u);
  EXPECT_EQ(r.find("a"), std::optional<std::uint32_t>(2));
  EXPECT_EQ(r.live(), 3u);
  auto src = r.release_source(0);
  ASSERT_NE(src, nullptr);
  EXPECT_EQ(src->tensors().size(), 1u);
  EXPECT_TRUE(r.get(0)->gone.load());
  EXPECT_EQ(r.get(0)->source, nullptr);
  EXPECT_EQ(r.get(0)->name, "a");
  EXPECT_EQ(r.get(0)->tensor_count, 1u);
  EXPECT_FALSE(r.release_source(0));
  EXPECT_EQ(r.live(), 2u);
  EXPECT_EQ(r.size(), 3u);
  // A new generation under a served name retires the old one in the same call; any other id is no licence.
  EXPECT_FALSE(r.add("b", synthetic("2x2"), {}, "", {}, 2, "wrong id"));
  EXPECT_FALSE(r.get(1)->retired.load());
  auto b2 = r.add("b", synthetic("5x5"), {}, "", {}, 1, "replaced");
  ASSERT_TRUE(b2) << b2.error().to_string();
  EXPECT_EQ(r.find("b"), b2.value());
  EXPECT_TRUE(r.get(1)->retired.load());
  EXPECT_EQ(r.get(1)->retired_because, "replaced");
}

// Readers look models up by id without a lock while models are added (SIGHUP beside acquires): every id they see
// below size() is a whole entry, and an entry once seen never changes. Run under the tsan preset too.
TEST(Registry, GetRunsBesideAdd) {
  Registry r;
  constexpr std::uint32_t kModels = 257;
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> seen{0};
  std::thread reader([&] {
    for (;;) {  // a last pass after the adds, also when they win the race
      const bool last = stop.load();
      const auto n = static_cast<std::uint32_t>(r.size());
      for (std::uint32_t id = 0; id < n; ++id) {
        const ModelEntry* e = r.get(id);
        if (e == nullptr || e->name != "m" + std::to_string(id) || e->tensor_index.size() != 1) {
          ADD_FAILURE() << "model " << id << " seen incomplete";
          return;
        }
        seen.fetch_add(1, std::memory_order_relaxed);
      }
      if (last) return;
    }
  });
  for (std::uint32_t i = 0; i < kModels; ++i) EXPECT_TRUE(r.add("m" + std::to_string(i), synthetic("2x3")));
  stop = true;
  reader.join();
  EXPECT_EQ(r.size(), kModels);
  EXPECT_GT(seen.load(), 0u);
}

}  // namespace
}  // namespace epk::daemon
