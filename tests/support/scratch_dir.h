// Temporary directories for tests. Each name carries the process id, so parallel ctest processes never share one, and
// a directory is emptied before use, so a test never reads what an earlier run left behind. Each is removed when the
// test program that made it exits (not when a forked child exits: a death test's child runs exit handlers too), as
// is each scratch file's path.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

namespace epk::test {

// `path` (a file or a directory) removed when this test program exits: not when a forked child exits.
inline void remove_at_exit(const std::filesystem::path& path) {
  struct Made {
    const pid_t owner = ::getpid();
    std::vector<std::filesystem::path> paths;
    ~Made() {
      if (::getpid() != owner) return;
      std::error_code ec;  // one a test removed itself is fine
      for (const auto& p : paths) std::filesystem::remove_all(p, ec);
    }
  };
  static Made made;
  made.paths.push_back(path);
}

// <temp>/<name>_<pid>, empty.
inline std::filesystem::path scratch_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  remove_at_exit(d);
  return d;
}

inline std::string running_test_name() { return ::testing::UnitTest::GetInstance()->current_test_info()->name(); }

// <temp>/<prefix>_<running test's name>_<pid>, empty: one directory per test of a fixture.
inline std::filesystem::path test_scratch_dir(const std::string& prefix) {
  return scratch_dir(prefix + "_" + running_test_name());
}

// <temp>/<prefix>_<running test's name>_<pid><extension>: the path of one test's file, not created.
inline std::string test_scratch_file(const std::string& prefix, const std::string& extension) {
  const auto path = std::filesystem::temp_directory_path() /
                    (prefix + "_" + running_test_name() + "_" + std::to_string(::getpid()) + extension);
  remove_at_exit(path);  // whatever the test writes there
  return path.string();
}

}  // namespace epk::test
