// daemon/lanes/host_tiers.h without a GPU: a model's host tier is made once from its file (every tensor checked),
// holds exactly what DeviceTier::fill_host lays out, is sealed, is shared while any lane holds it and made anew after
// the last let it go; a tensor whose stored bytes fail their checksum refuses the tier. (Here the driver is absent, so
// the registration fails and the tier serves unregistered, as epkd's log says; the GPU tests cover registration.)
#include "daemon/lanes/host_tiers.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

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

TEST_F(HostTiersTest, OneSealedTierPerModelWhileAnyoneHoldsIt) {
  auto src = open();
  ASSERT_TRUE(src);
  auto tier = placement(*src);
  ASSERT_GT(tier->region_bytes(), 0u);
  std::vector<std::byte> want(tier->region_bytes());
  ASSERT_TRUE(tier->fill_host(want, [](std::size_t) { return Status{}; }));

  HostTiers tiers(3);
  auto a = tiers.get(7, *tier, *src, 0);
  ASSERT_TRUE(a) << a.error().to_string();
  const HostTier& t = **a;
  EXPECT_TRUE(t.memory.sealed());
  ASSERT_EQ(t.memory.size(), want.size());
  EXPECT_TRUE(std::equal(want.begin(), want.end(), t.memory.bytes().begin()));
  EXPECT_EQ(::fcntl(t.memory.fd(), F_GET_SEALS) & F_SEAL_WRITE, F_SEAL_WRITE);
  // A second lane gets the same one; another model gets its own.
  auto again = tiers.get(7, *tier, *src, 0);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->get(), a->get());
  auto other = tiers.get(8, *tier, *src, 0);
  ASSERT_TRUE(other);
  EXPECT_NE(other->get(), a->get());
  // Once every holder let it go, the next lane gets a new one (the old memfd is freed: its fd number is reused).
  const int old_fd = t.memory.fd();
  *a = nullptr;
  *again = nullptr;
  auto fresh = tiers.get(7, *tier, *src, 0);
  ASSERT_TRUE(fresh);
  EXPECT_EQ(::fcntl(old_fd, F_GET_SEALS) >= 0, (*fresh)->memory.fd() == old_fd);
  EXPECT_TRUE(std::equal(want.begin(), want.end(), (*fresh)->memory.bytes().begin()));
}

TEST_F(HostTiersTest, AStoredBufferThatFailsItsChecksumRefusesTheTier) {
  const std::uint64_t at = buffer_offset(path_, "layers.4.w", "payload");
  ASSERT_GT(at, 0u);
  xor_byte(path_, at + 9, 0x10);  // the file still opens (only the index is checked there)
  auto src = open();
  ASSERT_TRUE(src);
  auto tier = placement(*src);
  HostTiers tiers(2);
  auto made = tiers.get(1, *tier, *src, 0);
  ASSERT_FALSE(made);
  EXPECT_EQ(made.error().code, ErrorCode::kChecksum) << made.error().to_string();
  EXPECT_NE(made.error().message.find("layers.4.w"), std::string::npos) << made.error().message;
}

}  // namespace
}  // namespace epk::daemon
