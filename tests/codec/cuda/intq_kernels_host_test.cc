// The intq kernels' index arithmetic checked without a GPU: intq_kernels.cuh compiled by the host compiler with the
// CUDA names emulated (each CUDA thread of a block is a std::thread, __syncthreads a std::barrier, __shared__ a static
// reused block after block), run on small tensors and compared bit for bit with the CPU writers. The GPU test
// (intq_repack_test.cc) checks the same on the device, with the real intrinsics.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "codec/common/half.h"

namespace emu {
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};
thread_local dim3 blockIdx, threadIdx;
dim3 blockDim, gridDim;
std::barrier<>* block_barrier = nullptr;
}  // namespace emu

#define EPK_INTQ_HOST_EMULATION 1
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
using emu::blockDim;
using emu::blockIdx;
using emu::gridDim;
using emu::threadIdx;
template <class T>
T __ldg(const T* p) {
  return *p;
}
inline float __fmul_rn(float a, float b) { return a * b; }
struct EmuBf16 {
  std::uint16_t bits;
};
struct EmuHalf {
  std::uint16_t bits;
};
inline EmuBf16 __float2bfloat16_rn(float f) { return {epk::f32_to_bf16(f)}; }
inline std::uint16_t __bfloat16_as_ushort(EmuBf16 h) { return h.bits; }
inline EmuHalf __float2half_rn(float f) { return {epk::f32_to_f16(f)}; }
inline std::uint16_t __half_as_ushort(EmuHalf h) { return h.bits; }
inline void __syncthreads() { emu::block_barrier->arrive_and_wait(); }
inline std::uint32_t atomicOr(std::uint32_t* p, std::uint32_t v) {
  return std::atomic_ref<std::uint32_t>(*p).fetch_or(v);
}

#include "codec/cuda/intq/intq_kernels.cuh"
#include "codec/layouts/awq.h"
#include "codec/layouts/gptq.h"
#include "codec/layouts/intq_io.h"
#include "codec/layouts/marlin.h"
#include "codec/layouts/pack_bits.h"
#include "tests/codec/layouts/intq_test_util.h"

namespace epk::cuda::intq {
namespace {

using layouts::QuantTensor;

// Runs `kernel` over grid x block, blocks one after another, the threads of a block concurrently.
void launch(emu::dim3 grid, emu::dim3 block, const std::function<void()>& kernel) {
  emu::gridDim = grid;
  emu::blockDim = block;
  const unsigned threads = block.x * block.y;
  for (unsigned by = 0; by < grid.y; ++by) {
    for (unsigned bx = 0; bx < grid.x; ++bx) {
      std::barrier<> bar(threads);
      emu::block_barrier = &bar;
      std::vector<std::thread> pool;
      for (unsigned ty = 0; ty < block.y; ++ty) {
        for (unsigned tx = 0; tx < block.x; ++tx) {
          pool.emplace_back([&, bx, by, tx, ty] {
            emu::blockIdx = {bx, by, 1};
            emu::threadIdx = {tx, ty, 1};
            kernel();
          });
        }
      }
      for (auto& t : pool) t.join();
    }
  }
}

struct Host {
  std::vector<std::uint32_t> codes, zeros;
  detail::Geometry g;
};

Host stored(const QuantTensor& t) {
  Host h;
  h.codes.resize(layouts::packed_words(t.codes.size(), t.bits) + 1);  // +1: the kernels may read one word ahead
  EXPECT_TRUE(layouts::pack_bits(t.codes, t.bits, std::span(h.codes).first(h.codes.size() - 1)));
  std::vector<std::uint8_t> z(t.zeros.begin(), t.zeros.end());
  h.zeros.resize(layouts::packed_words(z.size(), t.bits) + 1);
  EXPECT_TRUE(layouts::pack_bits(z, t.bits, std::span(h.zeros).first(h.zeros.size() - 1)));
  h.g = detail::Geometry{t.bits, t.rows, t.cols, t.padded_rows, t.padded_cols, t.group_size};
  return h;
}

using layouts::testing::tensor_bytes;
std::vector<std::uint8_t> qweight_of(const std::vector<layouts::Tensor>& ts) { return tensor_bytes(ts, "qweight"); }

template <class T>
std::vector<std::uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<std::uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

void run_1d(std::size_t n, const std::function<void()>& kernel) {
  launch({static_cast<unsigned>((n + 63) / 64), 1, 1}, {64, 1, 1}, kernel);
}

// group_order_kernel's launch: one block of `threads` threads per group.
void run_per_group(unsigned groups, unsigned threads, const std::function<void()>& kernel) {
  launch({groups, 1, 1}, {threads, 1, 1}, kernel);
}

std::vector<std::uint8_t> as_bytes(const std::vector<std::uint32_t>& w) {
  std::vector<std::uint8_t> b(w.size() * 4);
  std::memcpy(b.data(), w.data(), b.size());
  return b;
}

TEST(IntqKernelsOnHost, DequantizeTilesEqualDequantizeIntq) {
  // 70 x 45: partial tiles on both axes; act-order groups, a perm, asymmetric 3-bit zeros.
  QuantTensor t = layouts::testing::random_intq_tensor(3, 70, 45, 16, false, true, true, 17);
  std::vector<layouts::intq::Encoded> all;
  all.push_back(std::move(*layouts::intq::encode_int(t, "w", DType::kBF16, "gptq")));
  const auto dir = layouts::testing::scratch_dir("emu");
  auto r = layouts::testing::write_and_open((dir / "w.epk").string(), all);
  ASSERT_TRUE(r) << r.error().message;
  for (bool bf16 : {true, false}) {
    const DType dt = bf16 ? DType::kBF16 : DType::kF16;
    std::vector<std::uint8_t> want(70 * 45 * 2);
    ASSERT_TRUE(layouts::intq::dequantize_intq(*r, r->tensors()[0], dt, want));
    Host h = stored(t);
    std::vector<std::uint16_t> out(70 * 45, 0xFFFF);
    const emu::dim3 grid{(45 + 31) / 32, 1, 1};  // one k tile row per launch row: exercises the grid-stride loop
    const emu::dim3 block{detail::kTile, detail::kTileRows, 1};
    launch(grid, block, [&] {
      if (bf16) {
        detail::dequantize_kernel<true>(h.codes.data(), t.scales.data(), h.zeros.data(), t.g_idx.data(), t.perm.data(),
                                        h.g, out.data());
      } else {
        detail::dequantize_kernel<false>(h.codes.data(), t.scales.data(), h.zeros.data(), t.g_idx.data(), t.perm.data(),
                                         h.g, out.data());
      }
    });
    EXPECT_EQ(std::memcmp(out.data(), want.data(), want.size()), 0) << (bf16 ? "bf16" : "fp16");
  }
}

TEST(IntqKernelsOnHost, GptqAwqMarlinWordsEqualTheCpuWriters) {
  for (int bits : {2, 3, 4, 8}) {
    QuantTensor t = layouts::testing::random_intq_tensor(bits, 96, 64, 32, false, false, false, 30 + bits);
    Host h = stored(t);
    const auto want = qweight_of(*layouts::write_gptq(t, layouts::GptqZeros::kV2));
    std::vector<std::uint32_t> out(want.size() / 4);
    launch({static_cast<unsigned>((out.size() + 63) / 64), 1, 1}, {64, 1, 1},
           [&] { detail::gptq_kernel(h.codes.data(), nullptr, h.g, out.data()); });
    EXPECT_EQ(as_bytes(out), want) << "gptq " << bits;
  }
  {
    QuantTensor t = layouts::testing::random_intq_tensor(4, 64, 72, 32, false, false, false, 40);
    Host h = stored(t);
    const auto want = qweight_of(*layouts::write_awq(t));
    std::vector<std::uint32_t> out(want.size() / 4);
    launch({static_cast<unsigned>((out.size() + 63) / 64), 1, 1}, {64, 1, 1},
           [&] { detail::awq_kernel(h.codes.data(), h.g, out.data()); });
    EXPECT_EQ(as_bytes(out), want) << "awq";
  }
  for (int bits : {4, 8}) {
    QuantTensor t = layouts::testing::random_intq_tensor(bits, 32, 128, 16, true, false, false, 50 + bits);
    Host h = stored(t);
    const auto want = qweight_of(*layouts::write_marlin(t));
    const auto perm = layouts::marlin_weight_perm(bits);
    std::vector<std::uint32_t> out(want.size() / 4);
    launch({static_cast<unsigned>((out.size() + 63) / 64), 1, 1}, {64, 1, 1},
           [&] { detail::marlin_kernel(h.codes.data(), perm.data(), nullptr, h.g, out.data()); });
    EXPECT_EQ(as_bytes(out), want) << "marlin " << bits;
  }
}

TEST(IntqKernelsOnHost, QzerosAndScalesEqualTheCpuWriters) {
  for (int bits : {2, 3, 4, 8}) {
    for (bool sym : {false, true}) {
      QuantTensor t = layouts::testing::random_intq_tensor(bits, 96, 64, 32, sym, false, false, 60 + bits);
      Host h = stored(t);
      const auto cpu = *layouts::write_gptq(t, layouts::GptqZeros::kV2);
      const auto want_z = tensor_bytes(cpu, "qzeros");
      std::vector<std::uint32_t> z(want_z.size() / 4);
      run_1d(z.size(), [&] {
        detail::pack_rows_kernel(sym ? nullptr : h.zeros.data(), 1u << (bits - 1), t.num_groups, t.padded_cols, bits,
                                 false, nullptr, z.data());
      });
      EXPECT_EQ(bytes_of(z), want_z) << "gptq qzeros " << bits << (sym ? " sym" : "");
      const auto want_s = tensor_bytes(cpu, "scales");  // f16
      std::vector<std::uint16_t> sc(want_s.size() / 2);
      run_1d(sc.size(), [&] { detail::scales_kernel<false>(t.scales.data(), sc.size(), nullptr, 1, sc.data()); });
      EXPECT_EQ(bytes_of(sc), want_s) << "scales " << bits;
    }
  }
  {
    QuantTensor t = layouts::testing::random_intq_tensor(4, 64, 72, 32, false, false, false, 70);
    Host h = stored(t);
    const auto want = tensor_bytes(*layouts::write_awq(t), "qzeros");
    std::vector<std::uint32_t> z(want.size() / 4);
    detail::Geometry g = h.g;
    g.padded_rows = t.num_groups;
    run_1d(z.size(), [&] { detail::awq_kernel(h.zeros.data(), g, z.data()); });
    EXPECT_EQ(bytes_of(z), want) << "awq qzeros";
  }
  for (std::int64_t group : {16, 32}) {  // 32 rows: group 32 is per-channel (Marlin's 32-entry permutation)
    QuantTensor t = layouts::testing::random_intq_tensor(4, 32, 128, group, true, false, false, 80);
    const auto want = tensor_bytes(*layouts::write_marlin(t), "scales");
    const bool grouped = t.group_size < t.padded_rows;
    const auto sperm = grouped ? layouts::marlin_scale_perm() : layouts::marlin_scale_perm_single();
    std::vector<std::uint16_t> sc(want.size() / 2);
    run_1d(sc.size(), [&] {
      detail::scales_kernel<false>(t.scales.data(), sc.size(), sperm.data(), grouped ? 64 : 32, sc.data());
    });
    EXPECT_EQ(bytes_of(sc), want) << "marlin scales, group " << group;
  }
}

TEST(IntqKernelsOnHost, GptqV1QzerosEqualTheCpuWriterAndFlagAZeroOfZero) {
  for (int bits : {2, 3, 4, 8}) {
    for (bool sym : {false, true}) {
      QuantTensor t = layouts::testing::random_intq_tensor(bits, 96, 64, 32, sym, false, false, 90 + bits);
      for (auto& z : t.zeros) z = z == 0 ? 1 : z;  // v1 cannot store 0
      Host h = stored(t);
      const auto want = tensor_bytes(*layouts::write_gptq(t, layouts::GptqZeros::kV1), "qzeros");
      std::vector<std::uint32_t> z(want.size() / 4);
      std::uint32_t flags = 0;
      run_1d(z.size(), [&] {
        detail::pack_rows_kernel(sym ? nullptr : h.zeros.data(), 1u << (bits - 1), t.num_groups, t.padded_cols, bits,
                                 true, &flags, z.data());
      });
      EXPECT_EQ(bytes_of(z), want) << "gptq v1 qzeros " << bits << (sym ? " sym" : "");
      EXPECT_EQ(flags, 0u);
    }
  }
  QuantTensor t = layouts::testing::random_intq_tensor(3, 32, 32, 16, false, false, false, 99);
  t.zeros.assign(t.zeros.size(), 5);
  t.zeros[37] = 0;  // group 1, column 5: 3-bit field 37 straddles words 3 and 4
  EXPECT_FALSE(layouts::write_gptq(t, layouts::GptqZeros::kV1));
  Host h = stored(t);
  std::vector<std::uint32_t> z(static_cast<std::size_t>(t.num_groups) * 3);
  std::uint32_t flags = 0;
  run_1d(z.size(), [&] { detail::pack_rows_kernel(h.zeros.data(), 4, t.num_groups, 32, 3, true, &flags, z.data()); });
  EXPECT_EQ(flags, detail::kZeroPointZero);
}

// Act-order GPTQ with a row perm: the CPU writer stores rows in feature order (g_idx follows them); on the device the
// inverse perm is computed and the qweight and g_idx kernels read through it.
TEST(IntqKernelsOnHost, GptqOfPermutedActOrderRowsEqualsTheCpuWriter) {
  for (int bits : {3, 4}) {
    QuantTensor t = layouts::testing::random_intq_tensor(bits, 96, 64, 32, false, true, true, 110 + bits);
    Host h = stored(t);
    const auto cpu = *layouts::write_gptq(t, layouts::GptqZeros::kV2);
    std::vector<std::int32_t> inv(static_cast<std::size_t>(t.padded_rows), -1);
    run_1d(inv.size(), [&] { detail::invert_perm_kernel(t.perm.data(), t.padded_rows, inv.data()); });
    for (std::size_t k = 0; k < inv.size(); ++k) ASSERT_EQ(t.perm[static_cast<std::size_t>(inv[k])], std::int32_t(k));
    const auto want_q = tensor_bytes(cpu, "qweight");
    std::vector<std::uint32_t> q(want_q.size() / 4);
    run_1d(q.size(), [&] { detail::gptq_kernel(h.codes.data(), inv.data(), h.g, q.data()); });
    EXPECT_EQ(bytes_of(q), want_q) << "qweight " << bits;
    std::vector<std::int32_t> g(inv.size());
    run_1d(g.size(), [&] {
      detail::gather_rows_kernel(t.g_idx.data(), t.group_size, inv.data(), t.padded_rows, g.data());
    });
    EXPECT_EQ(bytes_of(g), tensor_bytes(cpu, "g_idx")) << "g_idx " << bits;
  }
  // Static groups, no perm: g_idx is k / G, computed on the device without a g_idx buffer.
  QuantTensor t = layouts::testing::random_intq_tensor(4, 96, 64, 32, false, false, false, 120);
  std::vector<std::int32_t> g(96);
  run_1d(g.size(), [&] { detail::gather_rows_kernel(nullptr, 32, nullptr, 96, g.data()); });
  EXPECT_EQ(bytes_of(g), tensor_bytes(*layouts::write_gptq(t, layouts::GptqZeros::kV2), "g_idx"));
}

// Act-order Marlin: rows sorted by group on the device (stable, as sort_groups), then qweight, g_idx and perm parts
// equal write_marlin's.
TEST(IntqKernelsOnHost, MarlinOfActOrderEqualsTheCpuWriter) {
  struct Case {
    int bits;
    bool act_order, perm;
  };
  for (Case c : {Case{4, true, false}, Case{8, true, true}, Case{4, false, true}}) {
    SCOPED_TRACE(std::to_string(c.bits) + (c.act_order ? " act-order" : "") + (c.perm ? " perm" : ""));
    QuantTensor t = layouts::testing::random_intq_tensor(c.bits, 64, 128, 16, true, c.act_order, c.perm, 130 + c.bits);
    Host h = stored(t);
    const auto cpu = *layouts::write_marlin(t);
    std::vector<std::int32_t> order(static_cast<std::size_t>(t.padded_rows), -1);
    std::uint32_t flags = 0;
    const std::int32_t* g_idx = c.act_order ? t.g_idx.data() : nullptr;
    run_per_group(static_cast<unsigned>(t.num_groups), 64, [&] {
      detail::group_order_kernel(g_idx, t.group_size, t.rows, t.padded_rows, &flags, order.data());
    });
    EXPECT_EQ(flags, 0u);
    const auto want_q = tensor_bytes(cpu, "qweight");
    const auto mperm = layouts::marlin_weight_perm(c.bits);
    std::vector<std::uint32_t> q(want_q.size() / 4);
    run_1d(q.size(), [&] { detail::marlin_kernel(h.codes.data(), mperm.data(), order.data(), h.g, q.data()); });
    EXPECT_EQ(bytes_of(q), want_q);
    std::vector<std::int32_t> gi(order.size()), pm(order.size());
    run_1d(order.size(), [&] {
      detail::gather_rows_kernel(g_idx, t.group_size, order.data(), t.padded_rows, gi.data());
      detail::gather_rows_kernel(c.perm ? t.perm.data() : nullptr, 1, order.data(), t.padded_rows, pm.data());
    });
    EXPECT_EQ(bytes_of(gi), tensor_bytes(cpu, "g_idx"));
    EXPECT_EQ(bytes_of(pm), tensor_bytes(cpu, "perm"));
  }
}

TEST(IntqKernelsOnHost, GroupOrderFlagsAPaddingRowSortedIntoTheLogicalRows) {
  // 20 logical rows in 32 padded ones; padding row 25 claims group 0, so a stable sort moves it to position 5.
  std::vector<std::int32_t> g_idx(32);
  for (std::size_t k = 0; k < 32; ++k) g_idx[k] = static_cast<std::int32_t>(k / 5 % 4);
  g_idx[25] = 0;
  std::vector<std::int32_t> order(32);
  std::uint32_t flags = 0;
  // 7 threads per block: chunks that split groups and a scan width that is not a power of two.
  run_per_group(4, 7, [&] { detail::group_order_kernel(g_idx.data(), 5, 20, 32, &flags, order.data()); });
  EXPECT_EQ(flags, detail::kPaddingSortsInside);
  std::vector<std::int32_t> want(32);
  std::iota(want.begin(), want.end(), 0);
  std::stable_sort(want.begin(), want.end(),
                   [&](int a, int b) { return g_idx[std::size_t(a)] < g_idx[std::size_t(b)]; });
  EXPECT_EQ(order, want);
}

TEST(IntqKernelsOnHost, GroupOrderIsTheStableSortOfScatteredGroups) {
  // 301 rows in 13 shuffled groups of 23-24 rows, 64 threads per block: five chunks, every group spread over them.
  std::vector<std::int32_t> g_idx(301);
  for (std::size_t k = 0; k < g_idx.size(); ++k) g_idx[k] = static_cast<std::int32_t>(k % 13);
  std::mt19937 rng(7);
  std::shuffle(g_idx.begin(), g_idx.end(), rng);
  std::vector<std::int32_t> order(g_idx.size(), -1);
  std::uint32_t flags = 0;
  run_per_group(13, 64, [&] { detail::group_order_kernel(g_idx.data(), 24, 301, 301, &flags, order.data()); });
  EXPECT_EQ(flags, 0u);
  std::vector<std::int32_t> want(g_idx.size());
  std::iota(want.begin(), want.end(), 0);
  std::stable_sort(want.begin(), want.end(),
                   [&](int a, int b) { return g_idx[std::size_t(a)] < g_idx[std::size_t(b)]; });
  EXPECT_EQ(order, want);
}

}  // namespace
}  // namespace epk::cuda::intq
