// daemon/lanes/host_tiers.h without a GPU: a model's host tier is made once from its file (every tensor checked),
// holds exactly what DeviceTier's host parts written in order hold, is sealed once complete, is shared while any
// lane holds it and made anew after the last let it go; a tensor serves before the rest are in (filled by the
// decode that needs it); a tensor whose stored bytes fail their checksum is refused by name, and the tier is then
// not one to pass to clients. (Here the driver is absent, so the registration fails and the tier serves
// unregistered, as epkd's log says; the GPU tests cover registration.)
#include "daemon/lanes/host_tiers.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <future>
#include <thread>

#include "daemon/sources/epk_source.h"
#include "tests/daemon/epk_test_models.h"
#include "tests/support/scratch_dir.h"

namespace epk::daemon {
namespace {

namespace fs = std::filesystem;
using namespace epk::test_models;

class HostTiersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = epk::test::test_scratch_dir("host_tiers");
    path_ = (dir_ / "m.epk").string();
    auto w = container::Writer::create(path_, {{"source", "host_tiers_test"}});
    ASSERT_TRUE(w) << w.error().to_string();
    for (int i = 0; i < 5; ++i) {  // odd sizes, several tensors for several threads
      auto enc = encode_f32(gaussian(17 + 8 * i, 75 + 16 * i, 3 + i), 17 + 8 * i, 75 + 16 * i, 4.0);
      ASSERT_TRUE(enc) << enc.error().to_string();
      ASSERT_TRUE(write_lattice(*w, "layers." + std::to_string(i) + ".w", *enc));
    }
    std::vector<float> norm(7, 1.5f);
    ASSERT_TRUE(write_raw(*w, "norm", DType::kF32, {7}, bytes_of(norm)));
    ASSERT_TRUE(w->finish());
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::shared_ptr<const ModelSource> open() {
    auto s = open_epk_source(path_);
    EXPECT_TRUE(s) << s.error().to_string();
    return s ? std::shared_ptr<const ModelSource>(std::move(*s)) : nullptr;
  }
  static std::unique_ptr<serve::DeviceTier> placement(const ModelSource& src) {
    std::vector<const serve::Producer*> producers(src.tensors().size());
    for (std::size_t i = 0; i < producers.size(); ++i) producers[i] = src.producer(i);
    return std::make_unique<serve::DeviceTier>(nullptr, std::move(producers), 0, [](std::int64_t) {});
  }

  fs::path dir_;
  std::string path_;
};

std::size_t tensor_index(const ModelSource& src, const std::string& name) {
  for (std::size_t i = 0; i < src.tensors().size(); ++i) {
    if (src.tensors()[i].name == name) return i;
  }
  ADD_FAILURE() << name << " is not in the model";
  return 0;
}

// Blocks until `tier` is complete (sealed), through when_complete.
void wait_complete(HostTier& tier) {
  // Shared: set_value on the finisher may still be returning after this waiter has woken and gone.
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> ready = done->get_future();
  tier.when_complete([done] { done->set_value(); });
  ready.wait();
  EXPECT_TRUE(tier.complete());
}

// What a complete host tier holds: its parts written in tensor order, then the tail.
std::vector<std::byte> region_in_order(const serve::DeviceTier& tier) {
  std::vector<std::byte> region(tier.region_bytes());
  const std::vector<serve::DeviceTier::HostPart> parts = tier.host_parts();
  for (const serve::DeviceTier::HostPart& part : parts) serve::DeviceTier::write_host_part(region, part);
  serve::DeviceTier::zero_host_tail(region, parts);
  return region;
}

TEST_F(HostTiersTest, OneSealedTierPerModelWhileAnyoneHoldsIt) {
  auto src = open();
  ASSERT_TRUE(src);
  auto tier = placement(*src);
  ASSERT_GT(tier->region_bytes(), 0u);
  const std::vector<std::byte> want = region_in_order(*tier);

  HostTiers tiers(3);
  auto a = tiers.get(7, *tier, src, 0);
  ASSERT_TRUE(a) << a.error().to_string();
  HostTier& t = **a;
  wait_complete(t);
  EXPECT_TRUE(t.outcome()) << t.outcome().error().to_string();
  ASSERT_EQ(t.size(), want.size());
  EXPECT_TRUE(std::equal(want.begin(), want.end(), t.bytes().begin()));
  EXPECT_EQ(::fcntl(t.fd(), F_GET_SEALS) & F_SEAL_WRITE, F_SEAL_WRITE);
  // A second lane gets the same one; another model gets its own.
  auto again = tiers.get(7, *tier, src, 0);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->get(), a->get());
  auto other = tiers.get(8, *tier, src, 0);
  ASSERT_TRUE(other);
  EXPECT_NE(other->get(), a->get());
  wait_complete(**other);
  // Once every holder let it go, the next lane gets a new one (the old memfd is freed: its fd number is reused).
  const int old_fd = t.fd();
  *a = nullptr;
  *again = nullptr;
  auto fresh = tiers.get(7, *tier, src, 0);
  ASSERT_TRUE(fresh);
  wait_complete(**fresh);
  EXPECT_EQ(::fcntl(old_fd, F_GET_SEALS) >= 0, (*fresh)->fd() == old_fd);
  EXPECT_TRUE(std::equal(want.begin(), want.end(), (*fresh)->bytes().begin()));
}

TEST_F(HostTiersTest, AStoredBufferThatFailsItsChecksumRefusesTheTier) {
  const std::uint64_t at = buffer_offset(path_, "layers.4.w", "payload");
  ASSERT_GT(at, 0u);
  xor_byte(path_, at + 9, 0x10);  // the file still opens (only the index is checked there)
  auto src = open();
  ASSERT_TRUE(src);
  auto tier = placement(*src);
  HostTiers tiers(2);
  auto made = tiers.get(1, *tier, src, 0);
  ASSERT_TRUE(made) << made.error().to_string();
  HostTier& t = **made;
  const std::size_t bad = tensor_index(*src, "layers.4.w");
  Status refused = t.ready(bad);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kChecksum) << refused.error().to_string();
  EXPECT_NE(refused.error().message.find("layers.4.w"), std::string::npos) << refused.error().message;
  EXPECT_TRUE(t.ready(tensor_index(*src, "layers.0.w")));  // the others still serve
  wait_complete(t);
  Status outcome = t.outcome();
  ASSERT_FALSE(outcome);  // not a tier to pass to a client
  EXPECT_EQ(outcome.error().code, ErrorCode::kChecksum);
}

TEST_F(HostTiersTest, ATensorServesBeforeTheRestAreInAndTheSealWaitsForTheLast) {
  // No filler: each tensor is filled by the first ready() that needs it, the tier completes (and runs
  // what waits on it) with the last one, and holds then exactly what its parts written in order hold.
  auto src = open();
  ASSERT_TRUE(src);
  auto tier = placement(*src);
  const std::vector<std::byte> want = region_in_order(*tier);
  auto memory = shm::HostTierMemory::create(tier->region_bytes(), "host-tiers-test");
  ASSERT_TRUE(memory) << memory.error().to_string();
  HostTier t(3, std::move(*memory), tier->host_parts(), src, 0);
  std::atomic<int> completions{0};
  t.when_complete([&completions] { ++completions; });
  const std::vector<std::size_t> order = {tensor_index(*src, "layers.3.w"), tensor_index(*src, "layers.0.w"),
                                          tensor_index(*src, "layers.4.w"), tensor_index(*src, "layers.1.w")};
  for (std::size_t i : order) {
    ASSERT_TRUE(t.ready(i));
    const serve::DeviceTier::Span sp = tier->span(i);
    EXPECT_TRUE(std::equal(want.begin() + static_cast<std::ptrdiff_t>(sp.offset),
                           want.begin() + static_cast<std::ptrdiff_t>(sp.offset + sp.bytes),
                           t.bytes().begin() + static_cast<std::ptrdiff_t>(sp.offset)))
        << "tensor " << i;
    EXPECT_FALSE(t.complete());
    EXPECT_EQ(completions, 0);
    EXPECT_LT(::fcntl(t.fd(), F_GET_SEALS) & F_SEAL_WRITE, F_SEAL_WRITE);  // not sealed: a client would refuse it
  }
  EXPECT_TRUE(t.ready(tensor_index(*src, "norm")));  // not in the tier: at once, and completes nothing
  EXPECT_FALSE(t.complete());
  ASSERT_TRUE(t.ready(tensor_index(*src, "layers.2.w")));  // the last one: sealed on a thread of its own
  wait_complete(t);
  EXPECT_EQ(completions, 1);
  EXPECT_TRUE(t.outcome());
  EXPECT_EQ(::fcntl(t.fd(), F_GET_SEALS) & F_SEAL_WRITE, F_SEAL_WRITE);
  EXPECT_TRUE(std::equal(want.begin(), want.end(), t.bytes().begin()));
  EXPECT_TRUE(t.ready(order[0]));  // again: at once
  t.when_complete([&completions] { ++completions; });  // complete: runs here and now
  EXPECT_EQ(completions, 2);
}

TEST_F(HostTiersTest, DecodesAndFillersRacingForTheSameTensorsLeaveTheSameBytes) {
  // Fillers (fill_next, as HostTiers' threads call it) and four "lanes" asking for every tensor in different orders: each tensor is written once
  // (by whoever took it first), every ready() returns ok with the tensor's bytes in place, and the tier completes
  // once.
  auto src = open();
  ASSERT_TRUE(src);
  auto tier = placement(*src);
  const std::vector<std::byte> want = region_in_order(*tier);
  std::vector<std::size_t> held;
  for (std::size_t i = 0; i < src->tensors().size(); ++i) {
    if (tier->holds(i)) held.push_back(i);
  }
  for (int round = 0; round < 20; ++round) {
    auto memory = shm::HostTierMemory::create(tier->region_bytes(), "host-tiers-test");
    ASSERT_TRUE(memory) << memory.error().to_string();
    HostTier t(static_cast<std::uint32_t>(round), std::move(*memory), tier->host_parts(), src, 0);
    std::atomic<int> completions{0}, bad{0};
    t.when_complete([&completions] { ++completions; });
    std::vector<std::thread> lanes;
    for (int filler = 0; filler < 1 + round % 3; ++filler) {  // as HostTiers' fill threads do
      lanes.emplace_back([&t] {
        while (t.fill_next()) {
        }
      });
    }
    for (int lane = 0; lane < 4; ++lane) {
      lanes.emplace_back([&, lane] {
        for (std::size_t j = 0; j < held.size(); ++j) {
          const std::size_t i = held[(j * (lane + 1) + std::size_t(round)) % held.size()];
          if (!t.ready(i)) ++bad;
          const serve::DeviceTier::Span sp = tier->span(i);
          if (!std::equal(want.begin() + static_cast<std::ptrdiff_t>(sp.offset),
                          want.begin() + static_cast<std::ptrdiff_t>(sp.offset + sp.bytes),
                          t.bytes().begin() + static_cast<std::ptrdiff_t>(sp.offset))) {
            ++bad;
          }
        }
      });
    }
    for (std::thread& l : lanes) l.join();
    wait_complete(t);
    EXPECT_EQ(bad.load(), 0) << "round " << round;
    EXPECT_EQ(completions.load(), 1) << "round " << round;
    EXPECT_TRUE(t.outcome());
    EXPECT_TRUE(std::equal(want.begin(), want.end(), t.bytes().begin())) << "round " << round;
  }
}

TEST_F(HostTiersTest, ATierGoneBeforeItCompletedStillAnswersWhatWaitsOnIt) {
  // Its model removed during the cold start: an open_stored waiting for the seal must get an answer.
  auto src = open();
  ASSERT_TRUE(src);
  auto tier = placement(*src);
  auto memory = shm::HostTierMemory::create(tier->region_bytes(), "host-tiers-test");
  ASSERT_TRUE(memory) << memory.error().to_string();
  int answered = 0;
  {
    HostTier t(4, std::move(*memory), tier->host_parts(), src, 0);  // no filler: it never completes by itself
    ASSERT_TRUE(t.ready(tensor_index(*src, "layers.1.w")));
    t.when_complete([&answered] { ++answered; });
    EXPECT_EQ(answered, 0);
  }
  EXPECT_EQ(answered, 1);
}

}  // namespace
}  // namespace epk::daemon
