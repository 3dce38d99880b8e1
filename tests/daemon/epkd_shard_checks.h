// Shard checks shared by the host-path test (epkd_shard_test: epkd --cpu) and the device-path test
// (epkd_shard_gpu_test): a model of odd shapes, and "every shard equals the same slice of the whole tensor, bit for
// bit" through a real epkd. Include after the harness (epkd_harness.h or epkd_device_harness.h).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "client/client.h"
#include "codec/container/writer.h"
#include "codec/layouts/intq_io.h"
#include "shm/layout.h"
#include "shm/shard.h"
#include "tests/codec/layouts/intq_test_util.h"
#include "tests/daemon/epk_test_models.h"

namespace epk::shard_checks {

using client::Client;
using client::Tensor;

struct TensorCase {
  std::string name;
  std::vector<std::uint64_t> shape;
  std::vector<shm::Layout> layouts;
};

// lattice-rans 129x67 (tiles span several rows: shards smaller than a tile, starting mid-tile) and 200x300, raw
// f32 [37, 5], a raw bias [37], raw bf16 [10, 12], intq 4-bit tensors (out x in): act-order q.w [192, 256], static
// groups of 64 q.s [128, 256], act-order with a row perm q.p [64, 128].
inline std::vector<TensorCase> model_cases() {
  using L = shm::Layout;
  const std::vector<L> lattice = {L::kDenseBF16, L::kDenseF32, L::kDenseF16, L::kStored, L::kRowwiseI8,
                                  L::kRowwiseF8E4M3};
  return {
      {"lin.a", {129, 67}, lattice},
      {"lin.b", {200, 300}, lattice},
      {"raw.w", {37, 5}, {L::kStored, L::kDenseBF16, L::kDenseF32}},
      {"raw.bias", {37}, {L::kStored, L::kDenseF16}},
      {"raw.bf", {10, 12}, {L::kStored, L::kDenseF32}},
      {"q.w", {192, 256}, {L::kDenseF16, L::kDenseBF16}},
      {"q.s", {128, 256}, {L::kDenseF16}},
  };
}

// q.s: K = 256 input features, N = 128 outputs, static groups of 64, asymmetric.
inline layouts::QuantTensor static_intq() {
  return layouts::testing::random_intq_tensor(4, 256, 128, 64, false, false, false, 44);
}
inline layouts::QuantTensor act_order_intq() {
  return layouts::testing::random_intq_tensor(4, 256, 192, 64, true, true, false, 43);
}

inline Status write_model(const std::string& path) {
  using namespace epk::test_models;  // NOLINT
  EPK_TRY_ASSIGN(auto a, encode_f32(gaussian(129, 67, 41), 129, 67, 3.0));
  EPK_TRY_ASSIGN(auto b, encode_f32(gaussian(200, 300, 42), 200, 300, 4.0));
  std::vector<float> rw(37 * 5), bias(37);
  for (std::size_t i = 0; i < rw.size(); ++i) rw[i] = 0.01f * static_cast<float>(i) - 0.5f;
  for (std::size_t i = 0; i < bias.size(); ++i) bias[i] = 1.0f / static_cast<float>(i + 1);
  std::vector<std::uint16_t> bf(10 * 12);
  for (std::size_t i = 0; i < bf.size(); ++i) bf[i] = static_cast<std::uint16_t>(0x3f00 + 91 * i);
  // Rows = in_features (K), cols = out_features (N) in QuantTensor's terms: the served dense tensor is [N, K].
  const layouts::QuantTensor q = act_order_intq();
  EPK_TRY_ASSIGN(auto qe, layouts::intq::encode_int(q, "q.w", DType::kF16, "gptq"));
  EPK_TRY_ASSIGN(auto se, layouts::intq::encode_int(static_intq(), "q.s", DType::kF16, "gptq"));
  const layouts::QuantTensor pq = layouts::testing::random_intq_tensor(4, 128, 64, 32, true, true, true, 45);
  EPK_TRY_ASSIGN(auto pe, layouts::intq::encode_int(pq, "q.p", DType::kF16, "gptq"));
  EPK_TRY_ASSIGN(auto w, container::Writer::create(path, {{"source", "epkd_shard_checks"}}));
  EPK_TRY(write_lattice(w, "lin.a", a));
  EPK_TRY(write_lattice(w, "lin.b", b));
  EPK_TRY(write_raw(w, "raw.w", DType::kF32, {37, 5}, bytes_of(rw)));
  EPK_TRY(write_raw(w, "raw.bias", DType::kF32, {37}, bytes_of(bias)));
  EPK_TRY(write_raw(w, "raw.bf", DType::kBF16, {10, 12}, bytes_of(bf)));
  EPK_TRY(w.add_tensor(qe.spec, qe.buffers()));
  EPK_TRY(w.add_tensor(se.spec, se.buffers()));
  EPK_TRY(w.add_tensor(pe.spec, pe.buffers()));
  return w.finish();
}

inline std::vector<std::uint8_t> host_bytes(Client& c, const Tensor& t) {
  std::vector<std::uint8_t> out(t.bytes);
  Status st = c.copy_to_host(t, out.data());
  EXPECT_TRUE(st) << st.error().to_string();
  return out;
}

// The slice by element index (no runs): every element of the slice read from its place in the whole tensor.
inline std::vector<std::uint8_t> slice_of(std::span<const std::uint8_t> whole, const std::vector<std::uint64_t>& shape,
                                          std::size_t elem, const shm::ShardRange& r) {
  std::vector<std::uint64_t> part = shape;
  part[r.axis()] = r.extent();
  std::uint64_t n = 1;
  for (auto d : part) n *= d;
  std::vector<std::uint8_t> out(n * elem);
  std::vector<std::uint64_t> idx(shape.size());
  for (std::uint64_t i = 0; i < n; ++i) {
    std::uint64_t rem = i;
    for (std::size_t d = shape.size(); d-- > 0;) {
      idx[d] = rem % part[d];
      rem /= part[d];
    }
    idx[r.axis()] += r.begin;
    std::uint64_t src = 0;
    for (std::size_t d = 0; d < shape.size(); ++d) src = src * shape[d] + idx[d];
    std::memcpy(out.data() + i * elem, whole.data() + src * elem, elem);
  }
  return out;
}

// What a shard's slot must hold, from the whole tensor's slot: the slice (rowwise: values, zero padding, scales).
inline std::vector<std::uint8_t> expected_shard(std::span<const std::uint8_t> whole, const Tensor& w, shm::Layout l,
                                                const shm::ShardRange& r) {
  if (!shm::is_rowwise(l)) return slice_of(whole, w.shape, dtype_bits(w.dtype) / 8, r);
  const std::uint64_t rows = w.shape[0], cols = w.shape[1];
  const std::uint64_t prow = r.dim == shm::ShardDim::kRows ? r.extent() : rows;
  const std::uint64_t pcol = r.dim == shm::ShardDim::kCols ? r.extent() : cols;
  auto values = slice_of(whole.first(rows * cols), w.shape, 1, r);
  const std::uint64_t at = shm::rowwise_scales_offset(prow, pcol);
  std::vector<std::uint8_t> out(at + prow * 4, 0);
  std::memcpy(out.data(), values.data(), values.size());
  const std::uint64_t from = r.dim == shm::ShardDim::kRows ? r.begin : 0;
  std::memcpy(out.data() + at, whole.data() + shm::rowwise_scales_offset(rows, cols) + from * 4, prow * 4);
  return out;
}

// The shards asked of a dimension of `extent`: every rank of worlds 1..5 (a rank whose share is empty must be
// refused), the first and last index, one starting at 3, and [5, 9).
inline std::vector<shm::ShardSpec> specs_for(shm::ShardDim dim, std::uint64_t extent) {
  std::vector<shm::ShardSpec> out;
  for (std::uint64_t w = 1; w <= 5; ++w) {
    for (std::uint64_t r = 0; r < w; ++r) out.push_back(shm::ShardSpec::split(dim, r, w));
  }
  out.push_back({dim, shm::ShardForm::kRange, 0, 1});
  out.push_back({dim, shm::ShardForm::kRange, extent - 1, extent});
  if (extent > 6) out.push_back({dim, shm::ShardForm::kRange, 3, extent - 2});
  if (extent > 9) out.push_back({dim, shm::ShardForm::kRange, 5, 9});
  return out;
}

// Every shard of every tensor and layout of model `model` equals the slice of the whole tensor's slot, bit for bit;
// shape and strides are the slice's, compact row-major. Returns the shards checked; *lattice (when given) receives
// how many of them were of the lattice-rans tensors (lin.*).
inline int check_every_shard(Client& c, const std::string& model, std::uint32_t device = 0, int* lattice = nullptr) {
  if (lattice != nullptr) *lattice = 0;
  int checked = 0;
  for (const TensorCase& tc : model_cases()) {
    for (shm::Layout l : tc.layouts) {
      SCOPED_TRACE(tc.name + " " + std::string(shm::layout_name(l)));
      auto whole = c.acquire(model, tc.name, l, device);
      EXPECT_TRUE(whole) << whole.error().to_string();
      if (!whole) continue;
      EXPECT_EQ(whole->shape, tc.shape);
      const auto all = host_bytes(c, *whole);
      for (shm::ShardDim dim : {shm::ShardDim::kRows, shm::ShardDim::kCols}) {
        const std::size_t axis = dim == shm::ShardDim::kCols ? 1 : 0;
        if (axis >= tc.shape.size()) continue;
        for (const shm::ShardSpec& spec : specs_for(dim, tc.shape[axis])) {
          SCOPED_TRACE(shm::describe(spec));
          auto range = shm::resolve_shard(spec, tc.shape, tc.name);
          auto t = c.acquire(model, tc.name, l, device, spec);
          if (!range) {  // an empty share: epkd refuses it as the spec module does
            EXPECT_FALSE(t);
            if (!t) {
              EXPECT_EQ(t.error().code, ErrorCode::kInvalidArgument) << t.error().to_string();
            }
            continue;
          }
          EXPECT_TRUE(t) << t.error().to_string();
          if (!t) continue;
          std::vector<std::uint64_t> shape = tc.shape;
          shape[axis] = range->extent();
          EXPECT_EQ(t->shape, shape);
          EXPECT_EQ(t->dtype, whole->dtype);
          std::int64_t stride = 1;
          for (std::size_t d = shape.size(); d-- > 0;) {
            EXPECT_EQ(t->strides[d], stride);
            stride *= static_cast<std::int64_t>(shape[d]);
          }
          const auto want = expected_shard(all, *whole, l, *range);
          EXPECT_EQ(t->bytes, want.size());
          if (t->bytes == want.size()) {
            EXPECT_TRUE(host_bytes(c, *t) == want) << "bytes differ from the slice";
          }
          EXPECT_TRUE(c.release(t->handle));
          ++checked;
          if (lattice != nullptr && tc.name.rfind("lin.", 0) == 0) ++*lattice;
        }
      }
      EXPECT_TRUE(c.release(whole->handle));
    }
  }
  return checked;
}

}  // namespace epk::shard_checks
