// Loads the committed reference vectors (tests/data/layouts/*.safetensors, written by
// scripts/testdata/make_layout_vectors.py) through codec/safetensors; the views point into its map.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "codec/common/bytes.h"
#include "codec/common/dtype.h"
#include "codec/layouts/tensor.h"
#include "codec/safetensors/reader.h"

namespace epk::layouts::testing {

inline std::string vector_path(const std::string& file) {
  return std::string(EPK_SOURCE_DIR) + "/tests/data/layouts/" + file;
}

// A whole file's bytes (the regeneration test compares files byte for byte).
inline std::vector<std::uint8_t> read_whole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

class Vectors {
 public:
  explicit Vectors(const std::string& file) {
    auto f = safetensors::File::open(vector_path(file));
    EXPECT_TRUE(f) << f.error().to_string();
    if (!f) return;
    file_ = std::move(*f);
    if (auto it = file_.metadata().find("params"); it != file_.metadata().end())
      params_ = nlohmann::json::parse(it->second, nullptr, false);
    ok_ = true;
  }

  bool ok() const { return ok_; }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& t : file_.tensors()) out.push_back(t.name);
    return out;
  }
  const nlohmann::json& params() const { return params_; }

  bool has(const std::string& name) const { return file_.find(name) != nullptr; }
  TensorView view(const std::string& name) const {
    const auto* t = file_.find(name);
    EXPECT_NE(t, nullptr) << name;
    if (!t) return {};
    return TensorView{t->name, t->dtype, std::vector<std::int64_t>(t->shape.begin(), t->shape.end()), t->data};
  }

  template <class T>
  std::vector<T> values(const std::string& name) const {
    TensorView v = view(name);
    std::vector<T> out(v.bytes.size() / sizeof(T));
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = load_le<T>(v.bytes.data() + i * sizeof(T));
    return out;
  }

 private:
  safetensors::File file_;
  nlohmann::json params_;
  bool ok_ = false;
};

}  // namespace epk::layouts::testing
