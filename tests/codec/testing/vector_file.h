// The committed reference vectors as owning copies, read and written through codec/safetensors (the project's reader
// and writer). Throws nothing: a malformed file fails the test.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "codec/common/dtype.h"
#include "codec/safetensors/reader.h"
#include "codec/safetensors/writer.h"

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
  auto file = safetensors::File::open(path);
  if (!file) {
    f.error = file.error().to_string();
    return f;
  }
  f.metadata = file->metadata();
  for (const auto& t : file->tensors()) {
    VectorTensor v;
    v.dtype = std::string(dtype_name(t.dtype));
    v.shape = t.shape;
    v.data.resize(t.data.size());
    if (!t.data.empty()) std::memcpy(v.data.data(), t.data.data(), t.data.size());
    f.tensors[t.name] = std::move(v);
  }
  f.ok = true;
  return f;
}

}  // namespace epk::testing

namespace epk::testing {

// Writes tensors as a safetensors file (for handing our streams to the reference in the live tests).
inline bool write_vector_file(const std::string& path, const std::map<std::string, VectorTensor>& tensors) {
  std::vector<safetensors::TensorSpec> specs;
  for (const auto& [name, t] : tensors) {
    auto dt = dtype_from_name(t.dtype);
    if (!dt) return false;
    specs.push_back({name, *dt, t.shape});
  }
  auto w = safetensors::Writer::create(path, specs);
  if (!w) return false;
  for (const auto& spec : w->tensors()) {
    const auto& d = tensors.at(spec.name).data;
    if (!w->write(spec.name, {reinterpret_cast<const std::uint8_t*>(d.data()), d.size()})) return false;
  }
  return bool(w->finish());
}

}  // namespace epk::testing
