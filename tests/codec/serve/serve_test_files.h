// Tensors for the serving layer's tests, written into an .epk file with the container Writer: a lattice-rans tensor
// encoded by codec/rate from Gaussian weights (fixed seed), the mapping `epk compress` writes, and intq "int"
// tensors as `epk import` writes them.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "codec/container/writer.h"
#include "codec/layouts/intq_io.h"
#include "codec/rans/container_io.h"
#include "codec/rate/encode.h"

namespace epk::serve::testing {

inline Status add_lattice(container::Writer& w, const std::string& name, std::uint32_t rows, std::uint32_t cols,
                          std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 0.02f);
  std::vector<float> weights(std::size_t{rows} * cols);
  for (float& v : weights) v = n(rng);
  rate::EncodeOptions o;
  o.target_bpp = 4.0;
  EPK_TRY_ASSIGN(rans::EncodedTensor enc,
                 rate::encode(std::as_bytes(std::span<const float>(weights)), rows, cols, DType::kF32, o, "test"));
  rans::ContainerForm form = rans::to_container(enc, name, rans::EncodingInfo{});
  return w.add_tensor(form.spec, form.buffers);
}

// An .epk file at `path` holding each (name, tensor) as an intq "int" tensor with packed codes, index dtype BF16.
inline Status write_intq_file(const std::string& path,
                              const std::vector<std::pair<std::string, layouts::QuantTensor>>& tensors) {
  EPK_TRY_ASSIGN(container::Writer w, container::Writer::create(path, {{"source", "serve_test_files"}}));
  for (const auto& [name, t] : tensors) {
    EPK_TRY_ASSIGN(auto e, layouts::intq::encode_int(t, name, DType::kBF16, "gptq", layouts::intq::CodeForm::kPacked));
    EPK_TRY(w.add_tensor(e.spec, e.buffers()));
  }
  return w.finish();
}

}  // namespace epk::serve::testing
