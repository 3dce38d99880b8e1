// The device-path tests' harness (epkd_gpu_test, epkd_multigpu_test): the binaries' build paths unless EPK_EPKD,
// EPK_TEST_CLIENT and EPK_CLI name staged copies (the GPU machine runs those, scripts/gpu/stage.sh), and DevEpkd, the
// harness's epkd on the device path. Include it instead of epkd_harness.h.
#pragma once

#include <cstdlib>
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

#include "tests/daemon/epkd_harness.h"

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

}  // namespace epk::test_harness
