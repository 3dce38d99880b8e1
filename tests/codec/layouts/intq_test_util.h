// Random logical tensors and .epk round trips for the intq tests.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "codec/common/half.h"
#include "codec/container/reader.h"
#include "codec/container/writer.h"
#include "codec/layouts/intq_io.h"
#include "codec/layouts/quant_tensor.h"
#include "tests/support/scratch_dir.h"

namespace epk::layouts::testing {

// Codes and zeros uniform over the width, f16-exact scales; act_order shuffles g_idx; with_perm adds a row perm.
inline QuantTensor random_intq_tensor(int bits, std::int64_t rows, std::int64_t cols, std::int64_t group,
                                      bool symmetric, bool act_order, bool with_perm, std::uint32_t seed) {
  std::mt19937 rng(seed);
  QuantTensor t = make_quant_tensor(bits, rows, cols, group);
  for (auto& c : t.codes) c = static_cast<std::uint8_t>(rng() & ((1u << bits) - 1));
  for (auto& s : t.scales) s = f16_to_f32(f32_to_f16(std::ldexp(static_cast<float>(rng() % 2000 + 1), -14)));
  for (auto& z : t.zeros) z = symmetric ? (1 << (bits - 1)) : static_cast<std::int32_t>(rng() & ((1u << bits) - 1));
  if (act_order) std::shuffle(t.g_idx.begin(), t.g_idx.end(), rng);
  if (with_perm) {
    t.perm.resize(static_cast<std::size_t>(rows));
    std::iota(t.perm.begin(), t.perm.end(), 0);
    std::shuffle(t.perm.begin(), t.perm.end(), rng);
  }
  return t;
}

// The bytes of the tensor of `ts` named `name`; empty, and a failure of the test, when there is none.
inline std::vector<std::uint8_t> tensor_bytes(const std::vector<Tensor>& ts, const std::string& name) {
  for (const auto& t : ts) {
    if (t.name == name) return t.bytes;
  }
  ADD_FAILURE() << "no tensor " << name;
  return {};
}

// One draw of random_intq_tensor for a parameterised test.
struct IntqCase {
  int bits;
  std::int64_t rows, cols, group;
  bool symmetric, act_order, perm;
};

// Readable, deterministic test names (the default prints the struct's bytes, padding included).
inline void PrintTo(const IntqCase& c, std::ostream* os) {
  *os << c.bits << "bit_" << c.rows << "x" << c.cols << "_g" << c.group << (c.symmetric ? "_sym" : "")
      << (c.act_order ? "_actorder" : "") << (c.perm ? "_perm" : "");
}

inline std::filesystem::path scratch_dir(const std::string& name) {
  return epk::test::scratch_dir("epk_intq_" + name);
}

// Writes the encoded tensors to `path` and opens it.
inline Result<container::Reader> write_and_open(const std::string& path, std::vector<intq::Encoded>& tensors) {
  EPK_TRY_ASSIGN(auto w, container::Writer::create(path, {}));
  for (auto& e : tensors) EPK_TRY(w.add_tensor(e.spec, e.buffers()));
  EPK_TRY(w.finish());
  return container::Reader::open(path);
}

// One encoded tensor written to a.epk in scratch_dir(dir_name), and the file opened.
inline Result<container::Reader> write_one_and_open(const std::string& dir_name, intq::Encoded tensor) {
  std::vector<intq::Encoded> one;
  one.push_back(std::move(tensor));
  return write_and_open((scratch_dir(dir_name) / "a.epk").string(), one);
}

}  // namespace epk::layouts::testing
