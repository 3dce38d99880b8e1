// Real .epk files for the daemon tests: raw tensors and lattice-rans tensors encoded by codec/rate, written with the
// container Writer through codec/rans/container_io.h (the mapping `epk compress` writes).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "codec/common/bytes.h"
#include "codec/container/reader.h"
#include "codec/container/writer.h"
#include "codec/rans/container_io.h"
#include "codec/rans/encoded_tensor.h"
#include "codec/rate/encode.h"
#include "tests/support/bytes.h"

namespace epk::test_models {

using test::bytes_of;

// Gaussian weights with per-row scales, fixed seed, as fp32.
inline std::vector<float> gaussian(std::uint32_t rows, std::uint32_t cols, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> w(std::size_t(rows) * cols);
  for (std::uint32_t r = 0; r < rows; ++r) {
    float scale = 0.02f * (1.0f + float(r % 7));
    for (std::uint32_t c = 0; c < cols; ++c) w[std::size_t(r) * cols + c] = n(rng) * scale;
  }
  return w;
}

inline Result<rans::EncodedTensor> encode_f32(const std::vector<float>& w, std::uint32_t rows, std::uint32_t cols,
                                              double bpp) {
  rate::EncodeOptions o;
  o.target_bpp = bpp;
  return rate::encode(std::as_bytes(std::span<const float>(w)), rows, cols, DType::kF32, o, "test");
}

// `count` tensors: gaussian(rows, cols, first_seed + i) encoded at 3 + i bits per weight, so that no two decode to
// the same bytes.
inline Result<std::vector<rans::EncodedTensor>> encode_gaussians(int count, std::uint32_t rows, std::uint32_t cols,
                                                                 std::uint64_t first_seed) {
  std::vector<rans::EncodedTensor> out;
  for (int i = 0; i < count; ++i) {
    EPK_TRY_ASSIGN(auto e, encode_f32(gaussian(rows, cols, first_seed + i), rows, cols, 3.0 + i));
    out.push_back(std::move(e));
  }
  return out;
}

inline Status write_lattice(container::Writer& w, const std::string& name, const rans::EncodedTensor& t) {
  rans::ContainerForm form = rans::to_container(t, name, rans::EncodingInfo{});
  return w.add_tensor(form.spec, form.buffers);
}

// t in the given stream profile; a native tensor's scales are rounded to the native grid first (a copy), so it
// decodes to the bytes of that rounded copy.
inline Status write_lattice(container::Writer& w, const std::string& name, const rans::EncodedTensor& t,
                            rans::StreamProfile profile) {
  if (profile == rans::StreamProfile::kReference) return write_lattice(w, name, t);
  rans::EncodedTensor rounded = t;
  EPK_TRY(rans::round_scales_to_native(rounded.scales));
  rans::EncodingInfo info;
  info.profile = profile;
  EPK_TRY_ASSIGN(auto f, rans::to_container_as(rounded, name, info));
  return w.add_tensor(f.form.spec, f.form.buffers);
}

inline Status write_raw(container::Writer& w, const std::string& name, DType dtype, std::vector<std::uint64_t> shape,
                        std::span<const std::uint8_t> bytes) {
  container::TensorSpec spec{name, std::move(shape), dtype, container::Encoding::kRaw, "{}"};
  return w.add_tensor(spec, {{"data", bytes}});
}

// The absolute file offset of buffer `buffer` of `tensor` (to corrupt it in place).
inline std::uint64_t buffer_offset(const std::string& path, const std::string& tensor, const std::string& buffer) {
  auto r = container::Reader::open(path);
  if (!r) return 0;
  const auto* t = r->find(tensor);
  if (t == nullptr) return 0;
  for (const auto& b : t->buffers) {
    if (b.name == buffer) return b.offset;
  }
  return 0;
}

inline void xor_byte(const std::string& path, std::uint64_t offset, std::uint8_t mask) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ mask);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

}  // namespace epk::test_models
