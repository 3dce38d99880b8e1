// A minimal GGUF writer for tests: builds well-formed files that the malformed-input tests then break.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codec/common/bytes.h"

namespace epk::layouts::testing {

struct GgufBuilder {
  std::string kv_bytes;
  std::string info_bytes;
  std::string data;
  std::uint64_t n_kv = 0, n_tensors = 0;
  std::uint32_t alignment = 32;

  static void put_string(std::string& out, const std::string& s) {
    append_le<std::uint64_t>(out, s.size());
    out += s;
  }
  void kv_u32(const std::string& key, std::uint32_t v) {
    put_string(kv_bytes, key);
    append_le<std::uint32_t>(kv_bytes, 4);
    append_le<std::uint32_t>(kv_bytes, v);
    ++n_kv;
  }
  void kv_string(const std::string& key, const std::string& v) {
    put_string(kv_bytes, key);
    append_le<std::uint32_t>(kv_bytes, 8);
    put_string(kv_bytes, v);
    ++n_kv;
  }
  void kv_f32_array(const std::string& key, const std::vector<float>& v) {
    put_string(kv_bytes, key);
    append_le<std::uint32_t>(kv_bytes, 9);
    append_le<std::uint32_t>(kv_bytes, 6);
    append_le<std::uint64_t>(kv_bytes, v.size());
    for (float f : v) append_le<float>(kv_bytes, f);
    ++n_kv;
  }
  // Appends a tensor's bytes to the data section (aligned) and its info.
  void tensor(const std::string& name, const std::vector<std::uint64_t>& ne, std::uint32_t type,
              const std::string& bytes) {
    while (data.size() % alignment) data.push_back('\0');
    put_string(info_bytes, name);
    append_le<std::uint32_t>(info_bytes, static_cast<std::uint32_t>(ne.size()));
    for (auto d : ne) append_le<std::uint64_t>(info_bytes, d);
    append_le<std::uint32_t>(info_bytes, type);
    append_le<std::uint64_t>(info_bytes, data.size());
    data += bytes;
    ++n_tensors;
  }
  std::vector<std::uint8_t> build(std::uint32_t version = 3) const {
    std::string out;
    append_le<std::uint32_t>(out, 0x46554747u);
    append_le<std::uint32_t>(out, version);
    append_le<std::uint64_t>(out, n_tensors);
    append_le<std::uint64_t>(out, n_kv);
    out += kv_bytes;
    out += info_bytes;
    while (out.size() % alignment) out.push_back('\0');
    out += data;
    return std::vector<std::uint8_t>(out.begin(), out.end());
  }
};

}  // namespace epk::layouts::testing
