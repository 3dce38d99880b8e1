// The fixture of the CLI's end-to-end tests (epk_compress_test.cc, epk_entropack_test.cc): a scratch folder with
// the demo model (odd sizes), the epk binary run with its output checked for sanitizer reports.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/scratch_dir.h"
#include "tests/tools/run_command.h"

namespace epk_cli_test {

namespace fs = std::filesystem;

using Outcome = epk::test::CommandResult;
using epk::test::run_command;
inline Outcome run(const std::string& cmd, bool with_stderr = true) { return run_command(cmd, with_stderr); }

inline nlohmann::json parse(const std::string& s) { return nlohmann::json::parse(s, nullptr, false); }

inline const nlohmann::json* find_tensor(const nlohmann::json& j, const std::string& name) {
  for (const auto& t : j["tensors"])
    if (t["name"] == name) return &t;
  return nullptr;
}

class EpkCompress : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = epk::test::test_scratch_dir("epk_compress");
    // Odd sizes: 200 hidden, 520 intermediate (GQA k/v of 50 rows).
    auto r = run(std::string(EPK_DEMO_MODEL) + " " + model() + " --layers 2 --hidden 200");
    ASSERT_EQ(r.status, 0) << r.out;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string tool() const { return EPK_TOOL; }
  std::string model() const { return (dir_ / "model").string(); }
  std::string path(const std::string& f) const { return (dir_ / f).string(); }
  // Under the asan preset a sanitizer report exits 1, which an error-path case would take for success: look for it.
  Outcome epk(const std::string& args, bool with_stderr = true) const {
    auto r = run(tool() + " " + args, true);
    EXPECT_EQ(r.out.find("Sanitizer"), std::string::npos) << args << "\n" << r.out;
    EXPECT_EQ(r.out.find("runtime error"), std::string::npos) << args << "\n" << r.out;
    if (!with_stderr) r = run(tool() + " " + args, false);
    return r;
  }
  // `epk verify E --against` the model `--json`, which must exit 0 and report ok: its report (discarded JSON, after
  // a failed expectation, when it did not).
  nlohmann::json verified(const std::string& e) const {
    auto r = epk("verify " + e + " --against " + model() + " --json", false);
    EXPECT_EQ(r.status, 0) << r.out;
    auto j = parse(r.out);
    EXPECT_FALSE(j.is_discarded()) << r.out;
    if (!j.is_discarded()) {
      EXPECT_TRUE(j.value("ok", false)) << r.out;
    }
    return j;
  }
  fs::path dir_;
};

}  // namespace epk_cli_test
