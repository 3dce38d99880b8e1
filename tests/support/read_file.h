// A whole file as a string, for tests that read what a process wrote (epkd's log, /proc maps, a config).
#pragma once

#include <fstream>
#include <iterator>
#include <string>

namespace epk::test {

// The file's bytes; empty when it cannot be opened.
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace epk::test
