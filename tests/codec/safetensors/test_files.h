// Temporary directories and files for the safetensors tests.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/support/scratch_dir.h"

namespace epk::testing {

inline std::filesystem::path fresh_dir(const std::string& name) {
  return epk::test::scratch_dir("epk_st_" + name);
}

inline void write_bytes(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// A safetensors file: u64 LE header length, `header` as is, then `data_len` bytes (0, 1, 2, ...).
inline std::string safetensors_bytes(const std::string& header, std::size_t data_len) {
  std::string s(8, '\0');
  std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  s += header;
  for (std::size_t i = 0; i < data_len; ++i) s += static_cast<char>(i & 0xFF);
  return s;
}

inline std::string data_dir() { return std::string(EPK_SOURCE_DIR) + "/tests/data/safetensors"; }

}  // namespace epk::testing
