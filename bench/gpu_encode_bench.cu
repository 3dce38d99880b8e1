// The device encoder (codec/cuda/encode/encode.h) against the CPU encoder: weights per second for the 10240x3840 bf16
// layer at 4 bpp and for a Llama-3-8B-shaped set of linear layers (32 x q/o 4096x4096, k/v 1024x4096, gate/up
// 14336x4096, down 4096x14336; random bf16, generated on the device and copied to pageable host memory, as the
// mapped safetensors file compress reads would be). Timed: pack_tensor with the device encoder (what
// `epk compress --device cuda` runs per tensor: encode, stored-rate check, error measurement) from host bytes to
// the host EncodedTensor, over the whole set in wall time, with one encoder and with three on three host threads
// (tensors in flight together); the CPU encoder on a subset (it is slow), with byte-for-byte comparisons.
//   gpu_encode_bench [--layers N] [--cpu-tensors N] [--bpp R]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "bench/gaussian_bf16.h"
#include "codec/common/checksum.h"
#include "codec/cuda/encode/encode.h"
#include "codec/cuda/encode/encode_steps.h"
#include "codec/rate/choose.h"
#include "codec/rate/encode.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The tensor of `seed` (bench/gaussian_bf16.h), generated on the device.
__global__ void gaussian_bf16(std::uint16_t* out, std::uint64_t n, std::uint64_t seed) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::uint64_t(gridDim.x) * blockDim.x) {
    out[i] = epk::bench::gaussian_bf16_at(seed, i);
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

// The stream's digest (every buffer and the geometry), so that a pass keeps digests, not streams: compress frees each
// tensor once written, and its payload's block goes back to the recycler for the next.
std::uint64_t digest_of(const epk::rate::Packed& p) {
  epk::Xxh3Stream h;
  auto add = [&h](const void* data, std::size_t bytes) {
    h.update({static_cast<const std::uint8_t*>(data), bytes});
  };
  const epk::rans::EncodedTensor& t = p.lattice;
  const int form = int(p.choice.form);
  add(&form, sizeof form);
  add(&t.prob_bits, sizeof t.prob_bits);
  add(t.payload.data(), t.payload.size() * 2);
  add(t.offsets.data(), t.offsets.size() * 4);
  add(t.states.data(), t.states.size() * 4);
  add(t.scales.data(), t.scales.size() * 4);
  add(t.freq_tables.data(), t.freq_tables.size() * sizeof(t.freq_tables[0]));
  add(t.tables.data(), t.tables.size() * sizeof(epk::rans::TableMeta));
  return h.digest();
}

bool same(const epk::rans::EncodedTensor& a, const epk::rans::EncodedTensor& b) {
  return a.prob_bits == b.prob_bits && a.payload == b.payload && a.offsets == b.offsets && a.states == b.states &&
         a.freq_tables == b.freq_tables && a.scales == b.scales &&
         a.tables.size() == b.tables.size() &&
         std::memcmp(a.tables.data(), b.tables.data(), a.tables.size() * sizeof(epk::rans::TableMeta)) == 0;
}

using StepTimes = epk::cuda::DeviceSteps::StepTimes;

// What the steps spent between two readings of an encoder's totals.
StepTimes minus(const StepTimes& after, const StepTimes& before) {
  StepTimes d;
  d.load = after.load - before.load;
  d.sample = after.sample - before.sample;
  d.quantize = after.quantize - before.quantize;
  d.counts = after.counts - before.counts;
  d.refit = after.refit - before.refit;
  d.code = after.code - before.code;
  d.error = after.error - before.error;
  d.upload = after.upload - before.upload;
  d.download = after.download - before.download;
  d.calls_sample = after.calls_sample - before.calls_sample;
  d.calls_quantize = after.calls_quantize - before.calls_quantize;
  return d;
}

// One line: wall seconds in each step of `wall` seconds of packing, and what was spent outside them.
void print_steps(const char* what, const StepTimes& st, double wall) {
  std::printf("%s, wall seconds in its steps: load %.4f (upload or prefetch wait %.4f), sample %.4f (%llu calls), "
              "quantize %.4f (%llu calls), counts %.4f, refit %.4f, code %.4f (payload download %.4f), error %.4f; "
              "outside the steps (pack_tensor, host) %.4f\n",
              what, st.load, st.upload, st.sample, (unsigned long long)st.calls_sample, st.quantize,
              (unsigned long long)st.calls_quantize, st.counts, st.refit, st.code, st.download, st.error,
              wall - (st.load + st.sample + st.quantize + st.counts + st.refit + st.code + st.error));
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
  std::vector<std::byte> host;
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
    // The step times of each pack (the encoder's totals before and after it); the best pack's are printed.
    StepTimes best_steps;
    for (int r = 0; r < 3; ++r) {
      const StepTimes before = (*enc)->steps().times();
      const double s = device_pack(host, rows, cols, &p);
      if (s < 0) return 1;
      if (s < best) {
        best = s;
        best_steps = minus((*enc)->steps().times(), before);
      }
    }
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
    print_steps("  best layer pack", best_steps, best);
  }

  // 2. The Llama-3-8B-shaped set, every tensor's bytes in host memory first (generated on the device, untimed).
  const Shape shapes[7] = {{"q", 4096, 4096},     {"k", 1024, 4096},     {"v", 1024, 4096}, {"o", 4096, 4096},
                          {"gate", 14336, 4096}, {"up", 14336, 4096}, {"down", 4096, 14336}};
  const int count = layers * 7;
  std::vector<std::vector<std::byte>> inputs(static_cast<std::size_t>(count));
  double set_weights = 0;
  for (int k = 0; k < count; ++k) {
    const Shape& s = shapes[k % 7];
    if (!make_weights(s.rows, s.cols, 101 + std::uint64_t(k), inputs[std::size_t(k)], dev, dev_bytes)) return 1;
    set_weights += double(s.rows) * s.cols;
  }
  // One pass over the set with `workers` device encoders on as many host threads (worker w takes tensors w,
  // w + workers, ...; each hands its encoder its own next tensor, as epk compress does); wall seconds, until the
  // last result is taken. A sink thread takes each result as compress's writer does: it keeps its digest and stored
  // rate and frees it, so that the payloads' blocks are recycled.
  struct Kept {
    std::uint64_t digest = 0;
    double stored_bpp = 0;
  };
  auto run_set = [&](int workers, std::vector<Kept>& out, StepTimes* times) {
    out.assign(std::size_t(count), Kept{});
    std::vector<std::unique_ptr<epk::cuda::DeviceEncoder>> encs;
    for (int w = 0; w < workers; ++w) {
      auto e = epk::cuda::DeviceEncoder::create(0);
      if (!e) return -1.0;
      encs.push_back(std::move(*e));
    }
    std::vector<int> failed(std::size_t(workers), 0);
    std::mutex mu;
    std::condition_variable ready;
    std::deque<std::pair<int, epk::rate::Packed>> results;
    int pending = count;
    const auto t0 = Clock::now();
    std::thread sink([&] {
      std::unique_lock<std::mutex> lock(mu);
      while (pending > 0) {
        ready.wait(lock, [&] { return !results.empty() || pending == 0; });
        while (!results.empty()) {
          auto [k, p] = std::move(results.front());
          results.pop_front();
          lock.unlock();
          out[std::size_t(k)] = Kept{digest_of(p), p.stored_bpp};
          lock.lock();
          --pending;
        }
      }
    });
    std::vector<std::thread> pool;
    for (int w = 0; w < workers; ++w) {
      pool.emplace_back([&, w] {
        for (int k = w; k < count; k += workers) {
          const Shape& s = shapes[k % 7];
          const bool more = k + workers < count;
          encs[std::size_t(w)]->prefetch_next(more ? std::span<const std::byte>(inputs[std::size_t(k + workers)])
                                                   : std::span<const std::byte>());
          auto p = epk::rate::pack_tensor(*encs[std::size_t(w)], inputs[std::size_t(k)], s.rows, s.cols,
                                          epk::DType::kBF16, o, epk::rate::ChoicePolicy{}, info, "w");
          if (!p) {
            std::printf("device pack: %s\n", p.error().message.c_str());
            failed[std::size_t(w)] = 1;
            std::lock_guard<std::mutex> lock(mu);
            for (int j = k; j < count; j += workers) --pending;  // never coming
            ready.notify_one();
            return;
          }
          std::lock_guard<std::mutex> lock(mu);
          results.emplace_back(k, std::move(*p));
          ready.notify_one();
        }
      });
    }
    for (auto& t : pool) t.join();
    sink.join();
    const double wall = seconds_since(t0);
    if (times) *times = encs[0]->steps().times();
    for (int f : failed)
      if (f) return -1.0;
    return wall;
  };
  std::vector<Kept> seq, par;
  StepTimes st;
  const double seq_s = run_set(1, seq, &st);
  const int workers = 3;
  const double par_s = run_set(workers, par, nullptr);
  if (seq_s < 0 || par_s < 0) return 1;
  double stored_bits = 0;
  int par_mismatch = 0;
  for (int k = 0; k < count; ++k) {
    const Shape& s = shapes[k % 7];
    stored_bits += seq[std::size_t(k)].stored_bpp * double(s.rows) * s.cols;
    if (seq[std::size_t(k)].digest != par[std::size_t(k)].digest) ++par_mismatch;
  }
  mismatches += par_mismatch;
  // The CPU encoder on the first tensors, against the sequential pass's streams.
  double cpu_total = 0, cpu_weights = 0;
  int cpu_done = 0;
  for (int k = 0; k < count && cpu_done < cpu_tensors; ++k, ++cpu_done) {
    const Shape& s = shapes[k % 7];
    const auto t0 = Clock::now();
    auto c = epk::rate::pack_tensor(inputs[std::size_t(k)], s.rows, s.cols, epk::DType::kBF16, o,
                                    epk::rate::ChoicePolicy{}, info, "w");
    const double t = seconds_since(t0);
    cpu_total += t;
    cpu_weights += double(s.rows) * s.cols;
    const bool identical = c && digest_of(*c) == seq[std::size_t(k)].digest;
    if (!identical) ++mismatches;
    std::printf("  tensor %d %s %ux%u: cpu %.3f s, identical: %s\n", k, s.name, s.rows, s.cols, t,
                identical ? "yes" : "NO");
  }
  std::printf("RESULT llama8b_shaped %d layers: %.3f G weights (stored %.4f bpp); device, 1 encoder: %.3f s = %.3f "
              "Gw/s; device, %d encoders on %d threads: %.3f s = %.3f Gw/s (streams %s the 1-encoder pass's); "
              "cpu (%d tensors, %.3f G weights) %.3f s = %.4f Gw/s\n",
              layers, set_weights / 1e9, stored_bits / set_weights, seq_s, set_weights / seq_s / 1e9, workers,
              workers, par_s, set_weights / par_s / 1e9, par_mismatch ? "DIFFER from" : "identical to", cpu_done,
              cpu_weights / 1e9, cpu_total, cpu_weights / std::max(cpu_total, 1e-9) / 1e9);
  print_steps("  1-encoder pass", st, seq_s);
  std::printf("RESULT stream mismatches against the CPU encoder: %d\n", mismatches);
  if (dev) cudaFree(dev);
  return mismatches ? 2 : 0;
}
