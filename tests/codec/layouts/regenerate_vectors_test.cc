// Label `reference`: regenerates tests/data/layouts with the Python reference libraries and requires the committed
// vectors to be byte-identical (so they are reproducible and nobody edited them by hand). Skips without the venv.
#include <gtest/gtest.h>

#include <cstdlib>

#include <filesystem>
#include <string>

#include "tests/codec/layouts/vectors.h"
#include "tests/support/scratch_dir.h"

namespace epk::layouts {
namespace {

constexpr const char* kPython = "/opt/refvenv/bin/python";

// Runs `script --out DIR` into a fresh temporary DIR and compares every committed file of tests/data/`data_dir`
// with the regenerated one; *compared counts them. Skips the test when the venv lacks a module the script needs.
void regenerate_and_compare(const std::string& script, const std::string& data_dir, int* compared) {
  *compared = 0;
  const auto dir = test::scratch_dir("epk_vectors_" + data_dir);
  const std::string cmd = std::string(kPython) + " " + EPK_SOURCE_DIR + "/scripts/testdata/" + script + " --out " +
                          dir.string() + " > " + (dir / "log.txt").string() + " 2>&1";
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    const auto log = testing::read_whole((dir / "log.txt").string());
    const std::string text(log.begin(), log.end());
    if (text.find("ModuleNotFoundError") != std::string::npos) GTEST_SKIP() << "reference module missing:\n" << text;
    FAIL() << script << " failed (" << rc << "):\n" << text;
  }
  for (const auto& entry : std::filesystem::directory_iterator(std::string(EPK_SOURCE_DIR) + "/tests/data/" + data_dir)) {
    const auto name = entry.path().filename().string();
    EXPECT_EQ(testing::read_whole(entry.path().string()), testing::read_whole((dir / name).string())) << name;
    ++*compared;
  }
  std::filesystem::remove_all(dir);
}

TEST(ReferenceVectors, RegeneratedFilesAreIdentical) {
  if (!std::filesystem::exists(kPython)) GTEST_SKIP() << kPython << " is missing";
  int compared = 0;
  regenerate_and_compare("make_layout_vectors.py", "layouts", &compared);
  if (IsSkipped() || HasFatalFailure()) return;
  EXPECT_GT(compared, 10);
}

TEST(ReferenceVectors, RegeneratedGgufTypeVectorsAreIdentical) {
  if (!std::filesystem::exists(kPython)) GTEST_SKIP() << kPython << " is missing";
  int compared = 0;
  regenerate_and_compare("make_gguf_vectors.py", "gguf", &compared);
  if (IsSkipped() || HasFatalFailure()) return;
  EXPECT_EQ(compared, 1);
}

}  // namespace
}  // namespace epk::layouts
