// Tensor-parallel shards on epkd's device path (no --cpu; skips without a GPU): every shard of every layout, decoded
// on the device (row shards of lattice-rans tensors by the kernel with a row-range plan; column shards, raw and intq
// shards by the CPU path and copied), equals the same slice of the whole device decode, bit for bit; and a row shard
// takes the kernel path (the exit log counts the shards the CPU path made).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/daemon/epkd_device_harness.h"
#include "tests/daemon/epkd_shard_checks.h"

namespace epk {
namespace {

namespace fs = std::filesystem;
using namespace epk::test_harness;  // NOLINT
using namespace epk::shard_checks;  // NOLINT

TEST(EpkdShardGpu, EveryDeviceShardIsTheSliceOfTheWholeDeviceDecode) {
  if (!shm::cuda_device_available(0)) GTEST_SKIP() << "no CUDA device (or driver): the device path is not tested";
  const fs::path dir = fs::temp_directory_path() / ("epkd_shard_gpu_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "m.epk").string();
  Status st = write_model(path);
  ASSERT_TRUE(st) << st.error().to_string();
  std::string log;
  {
    DevEpkd d({"--model", "m=" + path}, "64");
    ASSERT_TRUE(d.running());
    auto c = Client::connect(d.socket());
    ASSERT_TRUE(c) << c.error().to_string();
    ASSERT_FALSE(c->pools().empty());
    EXPECT_EQ(c->pools()[0].kind, shm::PoolKind::kDevice);
    const int n = check_every_shard(*c, "m");
    EXPECT_GT(n, 700);
    std::printf("device shards checked: %d\n", n);
    c->disconnect();
    EXPECT_EQ(d.terminate(), 0);
    std::ifstream in(d.log_path());
    std::stringstream ss;
    ss << in.rdbuf();
    log = ss.str();
  }
  // Column shards, raw and intq shards went through the CPU path; the row shards of lattice tensors did not (fewer
  // than all the shards checked).
  EXPECT_NE(log.find("shard slots by the CPU path"), std::string::npos) << log;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace epk
