// Locating the committed GPU decoder vectors (tests/data/cuda); EPK_TEST_DATA_DIR overrides the source tree path
// (the GPU machine runs the binaries outside this checkout).
#pragma once

#include <cstdlib>
#include <string>
#include <vector>

namespace epk::testing {

inline std::string cuda_data_dir() {
  if (const char* dir = std::getenv("EPK_TEST_DATA_DIR")) return std::string(dir) + "/cuda";
  return std::string(EPK_SOURCE_DIR) + "/tests/data/cuda";
}

inline const std::vector<std::string>& cuda_vector_names() {
  static const std::vector<std::string> names = {
      "gauss_29x520_2bpp",     "gauss_29x520_4bpp",     "gauss_29x520_8bpp", "studentt_16x1024_4bpp",
      "studentt_16x1024_8bpp", "gauss_bf16_31x264_4bpp", "gauss_13x100_4bpp"};
  return names;
}

}  // namespace epk::testing
