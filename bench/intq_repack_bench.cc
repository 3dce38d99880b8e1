// GPU repack and dequantization throughput of an intq layer (default 4096 x 14336, 4-bit, group 128, symmetric so
// Marlin applies), each beside a device-to-device copy of the same output bytes. CUDA events, median of --runs after
// warm-up. Usage: intq_repack_bench [--rows K] [--cols N] [--bits B] [--group G] [--runs R]
// Then the act-order paths (a scattered group map and a permutation) with their device-side row maps.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "codec/cuda/intq/intq_repack.h"
#include "codec/layouts/pack_bits.h"

namespace {

#define CHECK(expr)                                                                              \
  do {                                                                                           \
    cudaError_t e_ = (expr);                                                                     \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(2);                                                                              \
    }                                                                                            \
  } while (0)

double median_us(int runs, const std::function<void()>& fn) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 5; ++i) fn();
  std::vector<float> ms;
  for (int i = 0; i < runs; ++i) {
    CHECK(cudaEventRecord(a));
    fn();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  return 1000.0 * ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t k = 4096, n = 14336, group = 128;
  int bits = 4, runs = 100;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const long long v = std::atoll(argv[i + 1]);
    if (a == "--rows")
      k = v;
    else if (a == "--cols")
      n = v;
    else if (a == "--bits")
      bits = static_cast<int>(v);
    else if (a == "--group")
      group = v;
    else if (a == "--runs")
      runs = static_cast<int>(v);
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("intq_repack_bench: no CUDA device, skipped\n");
    return 0;
  }
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::mt19937 rng(1);
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(k * n));
  for (auto& c : codes) c = static_cast<std::uint8_t>(rng() & ((1u << bits) - 1));
  std::vector<std::uint32_t> words(epk::layouts::packed_words(codes.size(), bits));
  if (!epk::layouts::pack_bits(codes, bits, words)) return 2;
  const std::int64_t groups = (k + group - 1) / group;
  std::vector<float> scales(static_cast<std::size_t>(groups * n), 0.01f);

  void *d_codes, *d_scales, *d_out, *d_copy;
  const std::size_t dense_bytes = static_cast<std::size_t>(k * n * 2);
  CHECK(cudaMalloc(&d_codes, words.size() * 4));
  CHECK(cudaMalloc(&d_scales, scales.size() * 4));
  CHECK(cudaMalloc(&d_out, dense_bytes));
  CHECK(cudaMalloc(&d_copy, dense_bytes));
  CHECK(cudaMemcpy(d_codes, words.data(), words.size() * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_scales, scales.data(), scales.size() * 4, cudaMemcpyHostToDevice));
  epk::cuda::intq::DeviceIntq t;
  t.codes = static_cast<const std::uint32_t*>(d_codes);
  t.scales = static_cast<const float*>(d_scales);
  t.bits = bits;
  t.rows = t.padded_rows = k;
  t.cols = t.padded_cols = n;
  t.group_size = group;
  t.num_groups = groups;
  const std::size_t packed_bytes = words.size() * 4;

  std::printf("intq repack bench: %s, layer %lld x %lld (K x N), %d-bit, group %lld, median of %d runs\n", prop.name,
              static_cast<long long>(k), static_cast<long long>(n), bits, static_cast<long long>(group), runs);
  std::printf("%-22s %12s %12s %14s %14s %10s\n", "op", "out bytes", "us", "GB/s (out)", "d2d copy us", "vs copy");
  auto row = [&](const char* name, std::size_t out_bytes, const std::function<epk::Status()>& op) {
    auto st = op();
    if (!st) {
      std::printf("%-22s refused: %s\n", name, st.error().message.c_str());
      return;
    }
    CHECK(cudaDeviceSynchronize());
    const double us = median_us(runs, [&] { (void)op(); });
    const double copy_us =
        median_us(runs, [&] { CHECK(cudaMemcpyAsync(d_copy, d_out, out_bytes, cudaMemcpyDeviceToDevice)); });
    std::printf("%-22s %12zu %12.1f %14.1f %14.1f %9.2fx\n", name, out_bytes, us, out_bytes / us / 1e3, copy_us,
                us / copy_us);
  };
  auto* out32 = static_cast<std::uint32_t*>(d_out);
  row("repack gptq qweight", packed_bytes, [&] { return epk::cuda::intq::repack_gptq_qweight(t, out32, nullptr); });
  row("repack awq qweight", packed_bytes, [&] { return epk::cuda::intq::repack_awq_qweight(t, out32, nullptr); });
  row("repack marlin qweight", packed_bytes, [&] { return epk::cuda::intq::repack_marlin_qweight(t, out32, nullptr); });
  const std::size_t scale_bytes = scales.size() * 2;
  row("gptq qzeros (v2)", static_cast<std::size_t>(groups * n * bits / 8),
      [&] { return epk::cuda::intq::repack_gptq_qzeros_v2(t, out32, nullptr); });
  row("marlin scales fp16", scale_bytes,
      [&] { return epk::cuda::intq::repack_marlin_scales(t, epk::cuda::intq::DenseType::kFp16, d_out, nullptr); });
  row("dequantize bf16", dense_bytes,
      [&] { return epk::cuda::intq::dequantize_dense(t, epk::cuda::intq::DenseType::kBf16, d_out, nullptr); });
  row("dequantize fp16", dense_bytes,
      [&] { return epk::cuda::intq::dequantize_dense(t, epk::cuda::intq::DenseType::kFp16, d_out, nullptr); });

  // Act-order: the same codes with a scattered group map (each group still holds `group` rows, shuffled) and a random
  // permutation; the row maps are computed on the device first (invert_perm, group_order), then the repacks use them.
  std::vector<std::int32_t> g_idx(static_cast<std::size_t>(k)), perm(static_cast<std::size_t>(k));
  for (std::int64_t r = 0; r < k; ++r) g_idx[r] = static_cast<std::int32_t>(r / group);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(g_idx.begin(), g_idx.end(), rng);
  std::shuffle(perm.begin(), perm.end(), rng);
  void *d_g_idx, *d_perm, *d_inv, *d_order, *d_flags;
  CHECK(cudaMalloc(&d_g_idx, g_idx.size() * 4));
  CHECK(cudaMalloc(&d_perm, perm.size() * 4));
  CHECK(cudaMalloc(&d_inv, perm.size() * 4));
  CHECK(cudaMalloc(&d_order, perm.size() * 4));
  CHECK(cudaMalloc(&d_flags, 4));
  CHECK(cudaMemset(d_flags, 0, 4));
  CHECK(cudaMemcpy(d_g_idx, g_idx.data(), g_idx.size() * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_perm, perm.data(), perm.size() * 4, cudaMemcpyHostToDevice));
  epk::cuda::intq::DeviceIntq act = t;
  act.g_idx = static_cast<const std::int32_t*>(d_g_idx);
  act.perm = static_cast<const std::int32_t*>(d_perm);
  auto* inv = static_cast<std::int32_t*>(d_inv);
  auto* order = static_cast<std::int32_t*>(d_order);
  const std::size_t map_bytes = perm.size() * 4;
  std::printf("act-order (scattered g_idx, random perm):\n");
  row("invert perm", map_bytes, [&] { return epk::cuda::intq::invert_perm(act, inv, nullptr); });
  row("group order", map_bytes, [&] {
    return epk::cuda::intq::group_order(act, order, static_cast<std::uint32_t*>(d_flags), nullptr);
  });
  row("repack gptq qweight", packed_bytes,
      [&] { return epk::cuda::intq::repack_gptq_qweight(act, out32, nullptr, inv); });
  row("repack marlin qweight", packed_bytes,
      [&] { return epk::cuda::intq::repack_marlin_qweight(act, out32, nullptr, order); });
  for (void* p : {d_g_idx, d_perm, d_inv, d_order, d_flags}) CHECK(cudaFree(p));
  CHECK(cudaFree(d_codes));
  CHECK(cudaFree(d_scales));
  CHECK(cudaFree(d_out));
  CHECK(cudaFree(d_copy));
  return 0;
}
