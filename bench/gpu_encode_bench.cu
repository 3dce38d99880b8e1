// The device encoder (codec/cuda/encode.h) against the CPU encoder: weights per second for the 10240x3840 bf16
// layer at 4 bpp and for a Llama-3-8B-shaped set of linear layers (32 x q/o 4096x4096, k/v 1024x4096, gate/up
// 14336x4096, down 4096x14336; random bf16, generated on the device and copied to pageable host memory, as the
// mapped safetensors file compress reads would be). Timed per tensor: pack_tensor with the device encoder (what
// `epk compress --device cuda` runs per tensor: encode, stored-rate check, error measurement) from host bytes to
// the host EncodedTensor; the CPU encoder on a subset (it is slow), with a byte-for-byte comparison of the streams.
//   gpu_encode_bench [--layers N] [--cpu-tensors N] [--bpp R]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "codec/cuda/encode.h"
#include "codec/cuda/encode_steps.h"
#include "codec/rate/choose.h"
#include "codec/rate/encode.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

__device__ std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

// Gaussian bf16 (sigma 0.02, Box-Muller on a counter hash).
__global__ void gaussian_bf16(std::uint16_t* out, std::uint64_t n, std::uint64_t seed) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::uint64_t(gridDim.x) * blockDim.x) {
    const std::uint64_t h = mix(seed * 0x9e3779b97f4a7c15ull + i);
    const float u1 = (float((h >> 40) & 0xffffff) + 1.0f) / 16777217.0f;
    const float u2 = float((h >> 16) & 0xffffff) / 16777216.0f;
    const float g = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2) * 0.02f;
    const std::uint32_t bits = __float_as_uint(g);
    out[i] = std::uint16_t((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);  // round to nearest even
  }
}

struct Shape {
  const char* name;
  std::uint32_t rows, cols;
};

// Random bf16 weights of one tensor in host memory, generated on the device.
bool make_weights(std::uint32_t rows, std::uint32_t cols, std::uint64_t seed, std::vector<std::byte>& host,
                  void*& dev, std::size_t& dev_bytes) {
  const std::uint64_t n = std::uint64_t(rows) * cols;
  if (n * 2 > dev_bytes) {
    if (dev) cudaFree(dev);
    if (cudaMalloc(&dev, n * 2) != cudaSuccess) return false;
    dev_bytes = n * 2;
  }
  gaussian_bf16<<<1024, 256>>>(static_cast<std::uint16_t*>(dev), n, seed);
  host.resize(n * 2);
  return cudaMemcpy(host.data(), dev, n * 2, cudaMemcpyDeviceToHost) == cudaSuccess;
}

bool same(const epk::rans::EncodedTensor& a, const epk::rans::EncodedTensor& b) {
  return a.prob_bits == b.prob_bits && a.payload == b.payload && a.offsets == b.offsets && a.states == b.states &&
         a.freq_tables == b.freq_tables && a.scales == b.scales &&
         a.tables.size() == b.tables.size() &&
         std::memcmp(a.tables.data(), b.tables.data(), a.tables.size() * sizeof(epk::rans::TableMeta)) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  int layers = 32;
  int cpu_tensors = 7;
  double bpp = 4.0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--layers") layers = std::atoi(argv[i + 1]);
    else if (a == "--cpu-tensors") cpu_tensors = std::atoi(argv[i + 1]);
    else if (a == "--bpp") bpp = std::atof(argv[i + 1]);
  }
  if (epk::cuda::encoder_device_count() == 0) {
    std::printf("no CUDA device: nothing to measure\n");
    return 0;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  const int threads = int(std::max(1u, std::thread::hardware_concurrency()));
  std::printf("device: %s; host threads for the CPU encoder: %d; target %.2f bpp\n", prop.name, threads, bpp);
  auto enc = epk::cuda::DeviceEncoder::create(0);
  if (!enc) {
    std::printf("device encoder: %s\n", enc.error().message.c_str());
    return 1;
  }
  epk::rate::EncodeOptions o;
  o.target_bpp = bpp;
  o.threads = threads;
  epk::rans::EncodingInfo info;
  info.target_bpp = bpp;
  std::vector<std::byte> bufs[2];
  std::vector<std::byte>& host = bufs[0];
  void* dev = nullptr;
  std::size_t dev_bytes = 0;
  int mismatches = 0;

  // One tensor through pack_tensor on the device; seconds, or < 0 on error.
  auto device_pack = [&](const std::vector<std::byte>& w, std::uint32_t rows, std::uint32_t cols,
                         epk::rate::Packed* out) {
    const auto t0 = Clock::now();
    auto p = epk::rate::pack_tensor(**enc, w, rows, cols, epk::DType::kBF16, o, epk::rate::ChoicePolicy{}, info,
                                    "w");
    const double s = seconds_since(t0);
    if (!p) {
      std::printf("device pack: %s\n", p.error().message.c_str());
      return -1.0;
    }
    if (out) *out = std::move(*p);
    return s;
  };

  // 1. The 10240x3840 layer.
  {
    const std::uint32_t rows = 10240, cols = 3840;
    const double w = double(rows) * cols;
    if (!make_weights(rows, cols, 1, host, dev, dev_bytes)) return 1;
    epk::rate::Packed p;
    (*enc)->prefetch_next({});
    if (device_pack(host, rows, cols, &p) < 0) return 1;  // warm-up: allocations, module load
    double best = 1e9;
    for (int r = 0; r < 3; ++r) best = std::min(best, device_pack(host, rows, cols, &p));
    epk::rate::EncodeReport rep;
    std::optional<epk::rate::ReconstructionError> err;
    auto t0 = Clock::now();
    auto e = (*enc)->encode(host, rows, cols, epk::DType::kBF16, o, "w", &rep, &err);
    const double enc_s = seconds_since(t0);
    t0 = Clock::now();
    auto c = epk::rate::encode(host, rows, cols, epk::DType::kBF16, o, "w");
    const double cpu_s = seconds_since(t0);
    const bool identical = e && c && same(*e, *c);
    if (!identical) ++mismatches;
    std::printf("RESULT layer_10240x3840 device_pack %.4f s = %.3f Gw/s; device_encode %.4f s = %.3f Gw/s; "
                "cpu_encode %.3f s = %.4f Gw/s; stored %.4f bpp rel_l2 %.5f; identical to cpu: %s\n",
                best, w / best / 1e9, enc_s, w / enc_s / 1e9, cpu_s, w / cpu_s / 1e9, p.stored_bpp, p.rel_l2,
                identical ? "yes" : "NO");
  }

  // 2. The Llama-3-8B-shaped set.
  const epk::cuda::DeviceSteps::StepTimes before = (*enc)->steps().times();
  const Shape shapes[] = {{"q", 4096, 4096},     {"k", 1024, 4096},     {"v", 1024, 4096}, {"o", 4096, 4096},
                          {"gate", 14336, 4096}, {"up", 14336, 4096}, {"down", 4096, 14336}};
  double dev_total = 0, dev_weights = 0, cpu_total = 0, cpu_weights = 0, stored_bits = 0;
  int cpu_done = 0;
  // Tensor k+1 is generated (untimed) before tensor k is packed, and handed to the encoder as the next one, as
  // epk compress does: its copy to the device overlaps tensor k's encode.
  const int count = layers * 7;
  auto shape_of = [&](int k) { return shapes[k % 7]; };
  if (count > 0 && !make_weights(shape_of(0).rows, shape_of(0).cols, 101, bufs[0], dev, dev_bytes)) return 1;
  for (int k = 0; k < count; ++k) {
    const Shape s = shape_of(k);
    const std::vector<std::byte>& cur = bufs[k & 1];
    if (k + 1 < count) {
      if (!make_weights(shape_of(k + 1).rows, shape_of(k + 1).cols, 102 + std::uint64_t(k), bufs[(k + 1) & 1], dev,
                        dev_bytes)) {
        return 1;
      }
      (*enc)->prefetch_next(bufs[(k + 1) & 1]);
    } else {
      (*enc)->prefetch_next({});
    }
    const double w = double(s.rows) * s.cols;
    epk::rate::Packed p;
    const double t = device_pack(cur, s.rows, s.cols, &p);
    if (t < 0) return 1;
    dev_total += t;
    dev_weights += w;
    stored_bits += p.stored_bpp * w;
    if (cpu_done < cpu_tensors) {
      ++cpu_done;
      const auto t0 = Clock::now();
      auto c = epk::rate::pack_tensor(cur, s.rows, s.cols, epk::DType::kBF16, o, epk::rate::ChoicePolicy{}, info,
                                      "w");
      cpu_total += seconds_since(t0);
      cpu_weights += w;
      const bool identical = c && c->choice.form == p.choice.form &&
                             (p.choice.form != epk::rate::Form::kLatticeRans || same(c->lattice, p.lattice));
      if (!identical) ++mismatches;
      std::printf("  tensor %d %s %ux%u: device %.4f s, cpu %.3f s, identical: %s\n", k, s.name, s.rows, s.cols, t,
                  seconds_since(t0), identical ? "yes" : "NO");
    }
  }
  const epk::cuda::DeviceSteps::StepTimes& after = (*enc)->steps().times();
  const double steps_s = (after.load - before.load) + (after.sample - before.sample) +
                         (after.quantize - before.quantize) + (after.counts - before.counts) +
                         (after.refit - before.refit) + (after.code - before.code) + (after.error - before.error);
  std::printf("  within load: upload (or prefetch wait) %.3f s; within code: payload download %.3f s\n",
              after.upload - before.upload, after.download - before.download);
  std::printf("  device steps over the set (s): load %.3f, sample %.3f (%llu calls), quantize %.3f (%llu calls), "
              "counts %.3f, refit %.3f, code %.3f, error %.3f; outside the steps (pack_tensor, tables, host) %.3f\n",
              after.load - before.load, after.sample - before.sample,
              (unsigned long long)(after.calls_sample - before.calls_sample), after.quantize - before.quantize,
              (unsigned long long)(after.calls_quantize - before.calls_quantize), after.counts - before.counts,
              after.refit - before.refit, after.code - before.code, after.error - before.error, dev_total - steps_s);
  std::printf("RESULT stream mismatches against the CPU encoder: %d\n", mismatches);
  if (dev) cudaFree(dev);
  return mismatches ? 2 : 0;
}
