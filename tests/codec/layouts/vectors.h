// Loads the committed reference vectors (tests/data/layouts/*.safetensors, written by
// scripts/testdata/make_layout_vectors.py). A test-only reader: the files are ours and well-formed; malformed
// safetensors handling belongs to codec/safetensors.
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

namespace epk::layouts::testing {

inline std::string vector_path(const std::string& file) {
  return std::string(EPK_SOURCE_DIR) + "/tests/data/layouts/" + file;
}

inline std::vector<std::uint8_t> read_whole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

class Vectors {
 public:
  explicit Vectors(const std::string& file) : bytes_(read_whole(vector_path(file))) {
    if (bytes_.size() < 8) return;
    const std::uint64_t n = load_le<std::uint64_t>(bytes_.data());
    const std::string header(bytes_.begin() + 8, bytes_.begin() + 8 + static_cast<std::ptrdiff_t>(n));
    auto j = nlohmann::json::parse(header);
    const std::size_t base = 8 + n;
    for (auto& [name, e] : j.items()) {
      if (name == "__metadata__") {
        params_ = nlohmann::json::parse(e["params"].get<std::string>());
        continue;
      }
      Entry entry;
      entry.name = name;
      entry.dtype = *dtype_from_name(e["dtype"].get<std::string>());
      entry.shape = e["shape"].get<std::vector<std::int64_t>>();
      entry.begin = base + e["data_offsets"][0].get<std::size_t>();
      entry.end = base + e["data_offsets"][1].get<std::size_t>();
      entries_[name] = entry;
    }
    ok_ = true;
  }

  bool ok() const { return ok_; }
  bool has(const std::string& name) const { return entries_.count(name) != 0; }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [name, e] : entries_) out.push_back(name);
    return out;
  }
  const nlohmann::json& params() const { return params_; }

  TensorView view(const std::string& name) const {
    auto it = entries_.find(name);
    EXPECT_NE(it, entries_.end()) << name;
    if (it == entries_.end()) return {};
    const Entry& e = it->second;
    return TensorView{e.name, e.dtype, e.shape,
                      std::span<const std::uint8_t>(bytes_.data() + e.begin, e.end - e.begin)};
  }

  template <class T>
  std::vector<T> values(const std::string& name) const {
    TensorView v = view(name);
    std::vector<T> out(v.bytes.size() / sizeof(T));
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = load_le<T>(v.bytes.data() + i * sizeof(T));
    return out;
  }

 private:
  struct Entry {
    std::string name;
    DType dtype = DType::kU8;
    std::vector<std::int64_t> shape;
    std::size_t begin = 0, end = 0;
  };
  std::vector<std::uint8_t> bytes_;
  std::map<std::string, Entry> entries_;
  nlohmann::json params_;
  bool ok_ = false;
};

}  // namespace epk::layouts::testing
