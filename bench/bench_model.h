// The model the epkd acquire benchmarks serve (acquire_bench, gpu_acquire_bench): one seeded N(0, 0.02) rows x cols
// layer encoded once at `bpp`, written `copies` times (tensors t0, t1, ...) into one .epk, so every acquire of a new
// name is an uncached decode of the same work.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "codec/container/writer.h"
#include "codec/rans/container_io.h"
#include "codec/rate/encode.h"

namespace epk::bench {

inline Result<rans::EncodedTensor> write_gaussian_model(const std::string& path, std::uint32_t rows, std::uint32_t cols,
                                                        double bpp, int copies, unsigned threads) {
  std::mt19937_64 rng(1);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::vector<float> w(std::size_t(rows) * cols);
  for (float& v : w) v = nd(rng);
  rate::EncodeOptions o;
  o.target_bpp = bpp;
  o.threads = threads;
  EPK_TRY_ASSIGN(rans::EncodedTensor enc,
                 rate::encode(std::as_bytes(std::span<const float>(w)), rows, cols, DType::kF32, o, "w"));
  EPK_TRY_ASSIGN(auto writer, container::Writer::create(path, {}));
  for (int i = 0; i < copies; ++i) {
    auto form = rans::to_container(enc, "t" + std::to_string(i), {});
    EPK_TRY(writer.add_tensor(form.spec, form.buffers));
  }
  EPK_TRY(writer.finish());
  return enc;
}

}  // namespace epk::bench
