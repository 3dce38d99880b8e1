// A tiny safetensors reader private to the codec tests, for the committed reference vectors (the project's own
// reader lives in codec/safetensors; swap this out once it lands). Throws nothing: a malformed file fails the test.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace epk::testing {

struct VectorTensor {
  std::string dtype;  // safetensors spelling: "F32", "BF16", "U8", ...
  std::vector<std::uint64_t> shape;
  std::vector<std::byte> data;

  template <class T>
  std::vector<T> as() const {
    std::vector<T> out(data.size() / sizeof(T));
    if (!out.empty()) std::memcpy(out.data(), data.data(), out.size() * sizeof(T));
    return out;
  }
};

struct VectorFile {
  std::map<std::string, VectorTensor> tensors;
  std::map<std::string, std::string> metadata;
  bool ok = false;
  std::string error;

  bool has(const std::string& k) const { return tensors.count(k) != 0; }
  const VectorTensor& at(const std::string& k) const { return tensors.at(k); }
};

inline VectorFile read_vector_file(const std::string& path) {
  VectorFile f;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    f.error = "cannot open " + path;
    return f;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  if (bytes.size() < 8) {
    f.error = "short file";
    return f;
  }
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  if (n > bytes.size() - 8) {
    f.error = "header past end";
    return f;
  }
  const nlohmann::json j = nlohmann::json::parse(bytes.substr(8, n), nullptr, false);
  if (j.is_discarded()) {
    f.error = "bad header json";
    return f;
  }
  const std::size_t base = 8 + n;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      for (auto m = it->begin(); m != it->end(); ++m) f.metadata[m.key()] = m->get<std::string>();
      continue;
    }
    VectorTensor t;
    t.dtype = (*it)["dtype"].get<std::string>();
    t.shape = (*it)["shape"].get<std::vector<std::uint64_t>>();
    const auto off = (*it)["data_offsets"].get<std::vector<std::uint64_t>>();
    if (off.size() != 2 || off[1] < off[0] || base + off[1] > bytes.size()) {
      f.error = "bad offsets for " + it.key();
      return f;
    }
    t.data.resize(off[1] - off[0]);
    std::memcpy(t.data.data(), bytes.data() + base + off[0], t.data.size());
    f.tensors[it.key()] = std::move(t);
  }
  f.ok = true;
  return f;
}

}  // namespace epk::testing

namespace epk::testing {

// Writes tensors as a safetensors file (for handing our streams to the reference in the live tests).
inline bool write_vector_file(const std::string& path, const std::map<std::string, VectorTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  std::string text = header.dump();
  while (text.size() % 8) text.push_back(' ');
  std::ofstream out(path, std::ios::binary);
  const std::uint64_t n = text.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(text.data(), std::streamsize(text.size()));
  for (const auto& [name, t] : tensors) out.write(reinterpret_cast<const char*>(t.data.data()), std::streamsize(t.data.size()));
  return bool(out);
}

}  // namespace epk::testing
