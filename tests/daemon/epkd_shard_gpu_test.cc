// Tensor-parallel shards on epkd's device path (no --cpu; skips without a GPU): every shard of every layout, decoded
// on the device (lattice-rans row shards by the kernel with a row-range plan, column shards by the whole plan into
// a scratch and a 2-D copy; raw and intq shards by the CPU path and copied), equals the same slice of the whole
// device decode, bit for bit; the exit log counts the shards the CPU path made.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/daemon/epkd_device_harness.h"
#include "tests/daemon/epkd_shard_checks.h"
#include "tests/support/scratch_dir.h"

namespace epk {
namespace {

namespace fs = std::filesystem;
using namespace epk::test_harness;  // NOLINT
using namespace epk::shard_checks;  // NOLINT

TEST(EpkdShardGpu, EveryDeviceShardIsTheSliceOfTheWholeDeviceDecode) {
  if (!shm::cuda_device_available(0)) GTEST_SKIP() << "no CUDA device (or driver): the device path is not tested";
  const fs::path dir = test::scratch_dir("epkd_shard_gpu");
  const std::string path = (dir / "m.epk").string();
  Status st = write_model(path);
  ASSERT_TRUE(st) << st.error().to_string();
  std::string log;
  int n = 0, lattice = 0;
  {
    DevEpkd d({"--model", "m=" + path}, "64");
    auto c = d.connect();
    ASSERT_TRUE(c) << c.error().to_string();
    ASSERT_FALSE(c->pools().empty());
    EXPECT_EQ(c->pools()[0].kind, shm::PoolKind::kDevice);
    n = check_every_shard(*c, "m", 0, &lattice);
    EXPECT_GT(n, 700);
    std::printf("device shards checked: %d\n", n);
    c->disconnect();
    EXPECT_EQ(d.terminate(), 0);
    std::ifstream in(d.log_path());
    std::stringstream ss;
    ss << in.rdbuf();
    log = ss.str();
  }
  // Raw and intq shards went through the CPU path (lattice-rans shards did not: they are most of those checked).
  const auto at = log.find(" shard slots by the CPU path");
  ASSERT_NE(at, std::string::npos) << log;
  const auto from = log.rfind(' ', at - 1) + 1;
  const int host = std::stoi(log.substr(from, at - from));
  // At most the other tensors' shards (fewer: ranges asked twice, as rank 0 of 5 and as [0, 1), are cache hits).
  EXPECT_GT(host, 0);
  EXPECT_LE(host, n - lattice) << "lattice-rans shards should decode on the device";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace epk
