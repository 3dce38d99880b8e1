// The intq kernels' index arithmetic checked without a GPU: intq_kernels.cuh compiled by the host compiler with the
// CUDA names emulated (each CUDA thread of a block is a std::thread, __syncthreads a std::barrier, __shared__ a static
// reused block after block), run on small tensors and compared bit for bit with the CPU writers. The GPU test
// (intq_repack_test.cc) checks the same on the device, with the real intrinsics.
#include <gtest/gtest.h>

#include <barrier>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
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

#include "codec/cuda/intq_kernels.cuh"
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

std::vector<std::uint8_t> tensor_of(const std::vector<layouts::Tensor>& ts, const std::string& name) {
  for (const auto& t : ts)
    if (t.name == name) return t.bytes;
  ADD_FAILURE() << "no tensor " << name;
  return {};
}
std::vector<std::uint8_t> qweight_of(const std::vector<layouts::Tensor>& ts) { return tensor_of(ts, "qweight"); }

template <class T>
std::vector<std::uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<std::uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

void run_1d(std::size_t n, const std::function<void()>& kernel) {
  launch({static_cast<unsigned>((n + 63) / 64), 1, 1}, {64, 1, 1}, kernel);
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
           [&] { detail::gptq_kernel(h.codes.data(), h.g, out.data()); });
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
           [&] { detail::marlin_kernel(h.codes.data(), perm.data(), h.g, out.data()); });
    EXPECT_EQ(as_bytes(out), want) << "marlin " << bits;
  }
}

TEST(IntqKernelsOnHost, QzerosAndScalesEqualTheCpuWriters) {
  for (int bits : {2, 3, 4, 8}) {
    for (bool sym : {false, true}) {
      QuantTensor t = layouts::testing::random_intq_tensor(bits, 96, 64, 32, sym, false, false, 60 + bits);
      Host h = stored(t);
      const auto cpu = *layouts::write_gptq(t, layouts::GptqZeros::kV2);
      const auto want_z = tensor_of(cpu, "qzeros");
      std::vector<std::uint32_t> z(want_z.size() / 4);
      run_1d(z.size(), [&] {
        detail::pack_rows_kernel(sym ? nullptr : h.zeros.data(), 1u << (bits - 1), t.num_groups, t.padded_cols, bits,
                                 z.data());
      });
      EXPECT_EQ(bytes_of(z), want_z) << "gptq qzeros " << bits << (sym ? " sym" : "");
      const auto want_s = tensor_of(cpu, "scales");  // f16
      std::vector<std::uint16_t> sc(want_s.size() / 2);
      run_1d(sc.size(), [&] { detail::scales_kernel<false>(t.scales.data(), sc.size(), nullptr, 1, sc.data()); });
      EXPECT_EQ(bytes_of(sc), want_s) << "scales " << bits;
    }
  }
  {
    QuantTensor t = layouts::testing::random_intq_tensor(4, 64, 72, 32, false, false, false, 70);
    Host h = stored(t);
    const auto want = tensor_of(*layouts::write_awq(t), "qzeros");
    std::vector<std::uint32_t> z(want.size() / 4);
    detail::Geometry g = h.g;
    g.padded_rows = t.num_groups;
    run_1d(z.size(), [&] { detail::awq_kernel(h.zeros.data(), g, z.data()); });
    EXPECT_EQ(bytes_of(z), want) << "awq qzeros";
  }
  for (std::int64_t group : {16, 32}) {  // 32 rows: group 32 is per-channel (Marlin's 32-entry permutation)
    QuantTensor t = layouts::testing::random_intq_tensor(4, 32, 128, group, true, false, false, 80);
    const auto want = tensor_of(*layouts::write_marlin(t), "scales");
    const bool grouped = t.group_size < t.padded_rows;
    const auto sperm = grouped ? layouts::marlin_scale_perm() : layouts::marlin_scale_perm_single();
    std::vector<std::uint16_t> sc(want.size() / 2);
    run_1d(sc.size(), [&] {
      detail::scales_kernel<false>(t.scales.data(), sc.size(), sperm.data(), grouped ? 64 : 32, sc.data());
    });
    EXPECT_EQ(bytes_of(sc), want) << "marlin scales, group " << group;
  }
}

}  // namespace
}  // namespace epk::cuda::intq
