// The device-path tests' harness (epkd_gpu_test, epkd_multigpu_test): the binaries' build paths unless EPK_EPKD,
// EPK_TEST_CLIENT and EPK_CLI name staged copies (the GPU machine runs those, scripts/gpu/stage.sh), and DevEpkd, the
// harness's epkd on the device path. Include it instead of epkd_harness.h.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace epk::test_harness {
inline const char* env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != 0 ? v : fallback;
}
}  // namespace epk::test_harness

#define EPKD_PATH ::epk::test_harness::env_or("EPK_EPKD", EPKD_BUILD_PATH)
#define TEST_CLIENT_PATH ::epk::test_harness::env_or("EPK_TEST_CLIENT", TEST_CLIENT_BUILD_PATH)
#define EPK_CLI_PATH ::epk::test_harness::env_or("EPK_CLI", EPK_CLI_BUILD_PATH)

#include "client/client.h"
#include "codec/container/writer.h"
#include "shm/device_pool.h"
#include "tests/daemon/epk_test_models.h"
#include "tests/daemon/epkd_harness.h"
#include "tests/support/scratch_dir.h"

namespace epk::test_harness {

// epkd without --cpu, with `extra` flags; a clean exit on SIGTERM is part of every test.
class DevEpkd : public Epkd {
 public:
  DevEpkd(std::vector<std::string> extra, const std::string& budget_mb)
      : Epkd(std::move(extra), budget_mb, "", Epkd::Path::kDevice) {}
  ~DevEpkd() {
    if (running() && terminate() != 0) ADD_FAILURE() << "epkd did not exit 0 after SIGTERM";
  }
};

// The same model served twice, for the tests that compare the device path's bytes with the host path's: a device
// epkd with `device_args` and a host epkd (--cpu) with `--model model_arg`, each with the same budget, and a connected
// client of each once connect() has returned true.
struct DeviceAndHost {
  DeviceAndHost(std::vector<std::string> device_args, const std::string& model_arg, const std::string& budget_mb)
      : device(std::move(device_args), budget_mb), host({"--model", model_arg}, budget_mb) {}
  // False (with the failure recorded) when either epkd is not running or does not take a client.
  bool connect() {
    if (!device.running() || !host.running()) {
      ADD_FAILURE() << "epkd did not start (device path " << device.running() << ", host path " << host.running()
                    << ")";
      return false;
    }
    auto d = client::Client::connect(device.socket());
    auto h = client::Client::connect(host.socket());
    if (!d || !h) {
      ADD_FAILURE() << "connect: " << (d ? h.error().to_string() : d.error().to_string());
      return false;
    }
    on_device.emplace(std::move(*d));
    on_host.emplace(std::move(*h));
    return true;
  }
  DevEpkd device;
  Epkd host;
  std::optional<client::Client> on_device, on_host;
};

// A fresh directory per test holding m.epk: five lattice-rans tensors (w0 129 x 67; w1..w4 384 x 320, four of which
// in fp32, 480 KiB each, fill a 2 MiB pool; w3 in the native stream profile, so that every device test serves one)
// and a raw "norm" of five floats with edge values. Skips without a device.
class DeviceModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!shm::cuda_device_available(0)) GTEST_SKIP() << "no CUDA device (or driver): the device path is not tested";
    dir_ = epk::test::test_scratch_dir("epkd_dev");
    path_ = (dir_ / "m.epk").string();
    auto w = container::Writer::create(path_, {{"source", "epkd device-path test"}});
    ASSERT_TRUE(w);
    const std::vector<std::pair<std::uint32_t, std::uint32_t>> shapes = {{129, 67}, {384, 320}, {384, 320},
                                                                         {384, 320}, {384, 320}};
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      auto [rows, cols] = shapes[i];
      auto e = test_models::encode_f32(test_models::gaussian(rows, cols, 200 + i), rows, cols,
                                       2.0 + 0.5 * static_cast<double>(i % 3));
      ASSERT_TRUE(e) << e.error().to_string();
      ASSERT_TRUE(test_models::write_lattice(*w, "w" + std::to_string(i), *e,
                                             i == 3 ? rans::StreamProfile::kNative : rans::StreamProfile::kReference));
    }
    norm_ = {0.5f, 1.0f, -1.25f, 3.0e38f, -0.0f};
    ASSERT_TRUE(test_models::write_raw(*w, "norm", DType::kF32, {5}, test_models::bytes_of(norm_)));
    ASSERT_TRUE(w->finish());
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  static std::vector<std::uint8_t> host_bytes(client::Client& c, const client::Tensor& t) {
    std::vector<std::uint8_t> out(t.bytes);
    EXPECT_TRUE(c.copy_to_host(t, out.data()));
    return out;
  }

  std::filesystem::path dir_;
  std::string path_;
  std::vector<float> norm_;
};

}  // namespace epk::test_harness
