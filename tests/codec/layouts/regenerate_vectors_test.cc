// Label `reference`: regenerates tests/data/layouts with the Python reference libraries and requires the committed
// vectors to be byte-identical (so they are reproducible and nobody edited them by hand). Skips without the venv.
#include <gtest/gtest.h>

#include <cstdlib>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "tests/codec/layouts/vectors.h"

namespace epk::layouts {
namespace {

constexpr const char* kPython = "/opt/refvenv/bin/python";

TEST(ReferenceVectors, RegeneratedFilesAreIdentical) {
  if (!std::filesystem::exists(kPython)) GTEST_SKIP() << kPython << " is missing";
  const auto dir = std::filesystem::temp_directory_path() / ("epk_layout_vectors_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string cmd = std::string(kPython) + " " + EPK_SOURCE_DIR +
                          "/scripts/testdata/make_layout_vectors.py --out " + dir.string() + " > " +
                          (dir / "log.txt").string() + " 2>&1";
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    const auto log = testing::read_whole((dir / "log.txt").string());
    const std::string text(log.begin(), log.end());
    if (text.find("ModuleNotFoundError") != std::string::npos) GTEST_SKIP() << "reference module missing:\n" << text;
    FAIL() << "generator failed (" << rc << "):\n" << text;
  }
  int compared = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(EPK_SOURCE_DIR) + "/tests/data/layouts")) {
    const auto name = entry.path().filename().string();
    EXPECT_EQ(testing::read_whole(entry.path().string()), testing::read_whole((dir / name).string())) << name;
    ++compared;
  }
  EXPECT_GT(compared, 10);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace epk::layouts
