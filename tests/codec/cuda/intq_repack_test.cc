// GPU dequantization and repacking of intq tensors, bit for bit against the CPU path: dequantize_intq on the same
// stored .epk entry, and the "qweight" of write_gptq / write_awq / write_marlin. Skips without a GPU.
#include "codec/cuda/intq/intq_repack.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "codec/layouts/awq.h"
#include "codec/layouts/gptq.h"
#include "codec/layouts/intq_io.h"
#include "codec/layouts/marlin.h"
#include "codec/layouts/pack_bits.h"
#include "tests/codec/cuda/device_buffer.h"
#include "tests/codec/layouts/intq_test_util.h"

namespace epk::cuda::intq {
namespace {

using layouts::QuantTensor;
using testing::DeviceBuffer;

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

#define SKIP_WITHOUT_GPU() \
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device"

template <class T>
DeviceBuffer upload(const std::vector<T>& v) {
  DeviceBuffer b(v.size() * sizeof(T));
  if (!v.empty()) EPK_CUDA_CHECK(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return b;
}

// The stored logical form of t in device memory (what the daemon would upload from the .epk buffers).
struct Uploaded {
  DeviceBuffer codes, scales, zeros, g_idx, perm;
  DeviceIntq view;
};

Uploaded upload_tensor(const QuantTensor& t) {
  Uploaded u;
  std::vector<std::uint32_t> words(layouts::packed_words(t.codes.size(), t.bits));
  EXPECT_TRUE(layouts::pack_bits(t.codes, t.bits, words));
  std::vector<std::uint8_t> z8(t.zeros.begin(), t.zeros.end());
  std::vector<std::uint32_t> zw(layouts::packed_words(z8.size(), t.bits));
  EXPECT_TRUE(layouts::pack_bits(z8, t.bits, zw));
  u.codes = upload(words);
  u.scales = upload(t.scales);
  u.view.codes = static_cast<const std::uint32_t*>(u.codes.get());
  u.view.scales = static_cast<const float*>(u.scales.get());
  if (!layouts::is_symmetric(t)) {
    u.zeros = upload(zw);
    u.view.zeros = static_cast<const std::uint32_t*>(u.zeros.get());
  }
  if (!layouts::has_static_groups(t)) {
    u.g_idx = upload(t.g_idx);
    u.view.g_idx = static_cast<const std::int32_t*>(u.g_idx.get());
  }
  if (!t.perm.empty()) {
    u.perm = upload(t.perm);
    u.view.perm = static_cast<const std::int32_t*>(u.perm.get());
  }
  u.view.bits = t.bits;
  u.view.rows = t.rows;
  u.view.cols = t.cols;
  u.view.padded_rows = t.padded_rows;
  u.view.padded_cols = t.padded_cols;
  u.view.group_size = t.group_size;
  u.view.num_groups = t.num_groups;
  return u;
}

template <class T>
std::vector<T> download(const DeviceBuffer& b, std::size_t n) {
  std::vector<T> v(n);
  EPK_CUDA_CHECK(cudaDeviceSynchronize());
  if (n) EPK_CUDA_CHECK(cudaMemcpy(v.data(), b.get(), n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

using layouts::testing::tensor_bytes;
std::vector<std::uint8_t> qweight_bytes(const std::vector<layouts::Tensor>& ts) { return tensor_bytes(ts, "qweight"); }

using DeqCase = layouts::testing::IntqCase;

class GpuIntqDequant : public ::testing::TestWithParam<DeqCase> {};

TEST_P(GpuIntqDequant, MatchesDequantizeIntqBitForBit) {
  SKIP_WITHOUT_GPU();
  const DeqCase c = GetParam();
  QuantTensor t = layouts::testing::random_intq_tensor(c.bits, c.rows, c.cols, c.group, c.symmetric, c.act_order,
                                                       c.perm, 100 + c.bits);
  ASSERT_TRUE(layouts::pad_to(t, 32, 8));
  for (DenseType type : {DenseType::kBf16, DenseType::kFp16}) {
    const DType dt = type == DenseType::kBf16 ? DType::kBF16 : DType::kF16;
    auto e = layouts::intq::encode_int(t, "w", dt, "gptq");
    ASSERT_TRUE(e) << e.error().message;
    auto r = layouts::testing::write_one_and_open("gpu", std::move(*e));
    ASSERT_TRUE(r) << r.error().message;
    std::vector<std::uint8_t> want(static_cast<std::size_t>(t.rows * t.cols * 2));
    ASSERT_TRUE(layouts::intq::dequantize_intq(*r, r->tensors()[0], dt, want));
    auto stored = layouts::intq::read_int(*r, r->tensors()[0]);
    ASSERT_TRUE(stored);
    Uploaded u = upload_tensor(*stored);
    DeviceBuffer out(want.size());
    ASSERT_TRUE(dequantize_dense(u.view, type, out.get(), nullptr));
    auto got = download<std::uint8_t>(out, want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size()), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GpuIntqDequant,
                         ::testing::Values(DeqCase{4, 256, 96, 64, false, false, false},
                                           DeqCase{3, 97, 13, 32, false, true, true},
                                           DeqCase{2, 64, 7, 16, true, false, false},
                                           DeqCase{8, 130, 67, 128, false, true, false},
                                           DeqCase{5, 40, 9, 8, false, false, true}));

TEST(GpuIntqRepack, GptqQweightMatchesWriteGptq) {
  SKIP_WITHOUT_GPU();
  for (int bits : {2, 3, 4, 8}) {
    QuantTensor t = layouts::testing::random_intq_tensor(bits, 96, 64, 32, false, bits == 3, false,
                                                         7 + bits);  // 64 * b: whole qzeros words
    auto cpu = layouts::write_gptq(t, layouts::GptqZeros::kV2);
    ASSERT_TRUE(cpu) << cpu.error().message;
    const auto want = qweight_bytes(*cpu);
    Uploaded u = upload_tensor(t);
    DeviceBuffer out(want.size());
    ASSERT_TRUE(repack_gptq_qweight(u.view, static_cast<std::uint32_t*>(out.get()), nullptr));
    auto got = download<std::uint8_t>(out, want.size());
    EXPECT_EQ(got, want) << bits << " bits";
  }
}

TEST(GpuIntqRepack, AwqQweightMatchesWriteAwq) {
  SKIP_WITHOUT_GPU();
  QuantTensor t = layouts::testing::random_intq_tensor(4, 128, 72, 64, false, false, false, 3);
  auto cpu = layouts::write_awq(t);
  ASSERT_TRUE(cpu) << cpu.error().message;
  const auto want = qweight_bytes(*cpu);
  Uploaded u = upload_tensor(t);
  DeviceBuffer out(want.size());
  ASSERT_TRUE(repack_awq_qweight(u.view, static_cast<std::uint32_t*>(out.get()), nullptr));
  EXPECT_EQ(download<std::uint8_t>(out, want.size()), want);
}

TEST(GpuIntqRepack, MarlinQweightMatchesWriteMarlin) {
  SKIP_WITHOUT_GPU();
  for (int bits : {4, 8}) {
    QuantTensor t = layouts::testing::random_intq_tensor(bits, 64, 128, 32, true, false, false, 11 + bits);
    auto cpu = layouts::write_marlin(t);
    ASSERT_TRUE(cpu) << cpu.error().message;
    const auto want = qweight_bytes(*cpu);
    Uploaded u = upload_tensor(t);
    DeviceBuffer out(want.size());
    ASSERT_TRUE(repack_marlin_qweight(u.view, static_cast<std::uint32_t*>(out.get()), nullptr));
    EXPECT_EQ(download<std::uint8_t>(out, want.size()), want) << bits << " bits";
  }
}

TEST(GpuIntqRepack, QzerosAndScalesMatchTheCpuWriters) {
  SKIP_WITHOUT_GPU();
  for (bool sym : {false, true}) {
    QuantTensor t = layouts::testing::random_intq_tensor(3, 96, 64, 32, sym, false, false, sym ? 1 : 2);
    auto cpu = layouts::write_gptq(t, layouts::GptqZeros::kV2);
    ASSERT_TRUE(cpu);
    Uploaded u = upload_tensor(t);
    const auto want_z = tensor_bytes(*cpu, "qzeros");
    DeviceBuffer z(want_z.size());
    ASSERT_TRUE(repack_gptq_qzeros_v2(u.view, static_cast<std::uint32_t*>(z.get()), nullptr));
    EXPECT_EQ(download<std::uint8_t>(z, want_z.size()), want_z);
    const auto want_s = tensor_bytes(*cpu, "scales");
    DeviceBuffer s(want_s.size());
    ASSERT_TRUE(convert_scales(u.view, DenseType::kFp16, s.get(), nullptr));
    EXPECT_EQ(download<std::uint8_t>(s, want_s.size()), want_s);
  }
  {
    QuantTensor t = layouts::testing::random_intq_tensor(4, 128, 72, 64, false, false, false, 9);
    auto cpu = layouts::write_awq(t);
    ASSERT_TRUE(cpu);
    Uploaded u = upload_tensor(t);
    const auto want = tensor_bytes(*cpu, "qzeros");
    DeviceBuffer z(want.size());
    ASSERT_TRUE(repack_awq_qzeros(u.view, static_cast<std::uint32_t*>(z.get()), nullptr));
    EXPECT_EQ(download<std::uint8_t>(z, want.size()), want);
  }
  for (std::int64_t group : {16, 64}) {  // grouped, then per-channel (group == K)
    QuantTensor t = layouts::testing::random_intq_tensor(4, 64, 128, group, true, false, false, 5);
    auto cpu = layouts::write_marlin(t);
    ASSERT_TRUE(cpu);
    Uploaded u = upload_tensor(t);
    const auto want = tensor_bytes(*cpu, "scales");
    DeviceBuffer s(want.size());
    ASSERT_TRUE(repack_marlin_scales(u.view, DenseType::kFp16, s.get(), nullptr));
    EXPECT_EQ(download<std::uint8_t>(s, want.size()), want) << group;
  }
}

TEST(GpuIntqRepack, GptqV1QzerosMatchWriteGptqV1AndFlagAZeroOfZero) {
  SKIP_WITHOUT_GPU();
  DeviceBuffer flag(4);
  for (int bits : {2, 3, 4, 8}) {
    for (bool sym : {false, true}) {
      QuantTensor t = layouts::testing::random_intq_tensor(bits, 96, 64, 32, sym, false, false, 20 + bits);
      for (auto& z : t.zeros) z = z == 0 ? 1 : z;
      auto cpu = layouts::write_gptq(t, layouts::GptqZeros::kV1);
      ASSERT_TRUE(cpu) << cpu.error().message;
      const auto want = tensor_bytes(*cpu, "qzeros");
      Uploaded u = upload_tensor(t);
      DeviceBuffer z(want.size());
      EPK_CUDA_CHECK(cudaMemset(flag.get(), 0, 4));
      ASSERT_TRUE(repack_gptq_qzeros_v1(u.view, static_cast<std::uint32_t*>(z.get()),
                                        static_cast<std::uint32_t*>(flag.get()), nullptr));
      EXPECT_EQ(download<std::uint8_t>(z, want.size()), want) << bits << (sym ? " sym" : "");
      EXPECT_EQ(download<std::uint32_t>(flag, 1)[0], 0u);
    }
  }
  QuantTensor t = layouts::testing::random_intq_tensor(3, 32, 32, 16, false, false, false, 29);
  t.zeros.assign(t.zeros.size(), 5);
  t.zeros[37] = 0;  // a straddling 3-bit field
  Uploaded u = upload_tensor(t);
  DeviceBuffer z(static_cast<std::size_t>(t.num_groups) * 3 * 4);
  EPK_CUDA_CHECK(cudaMemset(flag.get(), 0, 4));
  ASSERT_TRUE(repack_gptq_qzeros_v1(u.view, static_cast<std::uint32_t*>(z.get()),
                                    static_cast<std::uint32_t*>(flag.get()), nullptr));
  EXPECT_EQ(download<std::uint32_t>(flag, 1)[0], kZeroPointZero);
}

TEST(GpuIntqRepack, GptqOfPermutedActOrderRowsMatchesWriteGptq) {
  SKIP_WITHOUT_GPU();
  for (int bits : {3, 4}) {
    QuantTensor t = layouts::testing::random_intq_tensor(bits, 96, 64, 32, false, true, true, 40 + bits);
    auto cpu = layouts::write_gptq(t, layouts::GptqZeros::kV2);
    ASSERT_TRUE(cpu) << cpu.error().message;
    Uploaded u = upload_tensor(t);
    DeviceBuffer inv(static_cast<std::size_t>(t.padded_rows) * 4);
    auto* inv_p = static_cast<std::int32_t*>(inv.get());
    ASSERT_TRUE(invert_perm(u.view, inv_p, nullptr));
    const auto want_q = qweight_bytes(*cpu);
    DeviceBuffer q(want_q.size());
    EXPECT_FALSE(repack_gptq_qweight(u.view, static_cast<std::uint32_t*>(q.get()), nullptr));  // perm without inverse
    ASSERT_TRUE(repack_gptq_qweight(u.view, static_cast<std::uint32_t*>(q.get()), nullptr, inv_p));
    EXPECT_EQ(download<std::uint8_t>(q, want_q.size()), want_q) << bits;
    const auto want_g = tensor_bytes(*cpu, "g_idx");
    DeviceBuffer g(want_g.size());
    ASSERT_TRUE(gptq_g_idx(u.view, inv_p, static_cast<std::int32_t*>(g.get()), nullptr));
    EXPECT_EQ(download<std::uint8_t>(g, want_g.size()), want_g) << bits;
  }
}

TEST(GpuIntqRepack, MarlinOfActOrderMatchesWriteMarlin) {
  SKIP_WITHOUT_GPU();
  for (bool with_perm : {false, true}) {
    QuantTensor t = layouts::testing::random_intq_tensor(4, 128, 128, 32, true, true, with_perm, 60 + with_perm);
    auto cpu = layouts::write_marlin(t);
    ASSERT_TRUE(cpu) << cpu.error().message;
    Uploaded u = upload_tensor(t);
    const std::size_t k = static_cast<std::size_t>(t.padded_rows);
    DeviceBuffer order(k * 4), flags(4), g(k * 4), p(k * 4);
    EPK_CUDA_CHECK(cudaMemset(flags.get(), 0, 4));
    auto* order_p = static_cast<std::int32_t*>(order.get());
    ASSERT_TRUE(group_order(u.view, order_p, static_cast<std::uint32_t*>(flags.get()), nullptr));
    const auto want_q = qweight_bytes(*cpu);
    DeviceBuffer q(want_q.size());
    ASSERT_TRUE(repack_marlin_qweight(u.view, static_cast<std::uint32_t*>(q.get()), nullptr, order_p));
    ASSERT_TRUE(marlin_g_idx_perm(u.view, order_p, static_cast<std::int32_t*>(g.get()),
                                  static_cast<std::int32_t*>(p.get()), nullptr));
    EXPECT_EQ(download<std::uint32_t>(flags, 1)[0], 0u);
    EXPECT_EQ(download<std::uint8_t>(q, want_q.size()), want_q) << with_perm;
    EXPECT_EQ(download<std::uint8_t>(g, k * 4), tensor_bytes(*cpu, "g_idx")) << with_perm;
    EXPECT_EQ(download<std::uint8_t>(p, k * 4), tensor_bytes(*cpu, "perm")) << with_perm;
  }
}

TEST(GpuIntqRepack, RefusesWhatTheLayoutCannotHold) {
  DeviceIntq v;
  v.codes = reinterpret_cast<const std::uint32_t*>(16);  // never dereferenced: refused before any launch
  v.bits = 3;
  v.rows = v.padded_rows = 16;  // 16 * 3 bits is not a whole word per column
  v.cols = v.padded_cols = 8;
  EXPECT_FALSE(repack_gptq_qweight(v, nullptr, nullptr));
  EXPECT_FALSE(repack_awq_qweight(v, nullptr, nullptr));  // not 4-bit
  v.bits = 4;
  v.perm = reinterpret_cast<const std::int32_t*>(16);
  EXPECT_FALSE(repack_marlin_qweight(v, nullptr, nullptr));
}

}  // namespace
}  // namespace epk::cuda::intq
