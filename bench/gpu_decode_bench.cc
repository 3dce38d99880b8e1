// GPU decode benchmark: the decoder's plan for each reference-compressed tensor (.epkraw files made on the GPU machine
// by scripts/gpu/make_bench_streams.py; the kernel it takes is named in each row), checked bit for bit against the
// reference package's own output, timed with CUDA events (median of many runs after warm-up, rotating over copies of
// inputs and outputs larger than L2), next to a device-to-device copy of the output size and the reference decoder's
// time (ref_times.txt from the same script). Also a 32-layer 8B-class stack decoded layer by layer, and two tensors'
// inputs read from pinned host memory in place and staged (the host tier's two reads).
//
// Usage: gpu_decode_bench DATA_DIR [--runs N] [--quick] [--only TENSOR [--max-warps W,W,..]]
//        gpu_decode_bench --tile-multiples M,M,.. [--bpp R] [--runs N]
//   --quick: a shorter stack; --only: that tensor in bf16, no stack (for profilers); --max-warps: that tensor again
//   with the work split capped at each W warps a block (more rounds of fewer warps), beside the plan's own.
//   --tile-multiples: no reference streams; seeded N(0, 0.02) bf16 tensors (4096x4096, 10240x3840, 14336x4096,
//   28672x8192, and the 8B-class layer stack) encoded here by the device encoder at R bpp (default 4), in the
//   reference profile and then in the native one with tiles M times the default length at that rate, each decoded
//   and checked against the CPU decoder: the two profiles side by side, and what a tile length costs in decode time
//   and buys in error.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/gaussian_bf16.h"
#include "codec/cuda/decode/decode.h"
#include "codec/cuda/decode/decode_desc.h"
#include "codec/cuda/decode/plan_overrides.h"
#include "codec/cuda/encode/encode.h"
#include "codec/model/tables.h"
#include "codec/rans/decoder.h"
#include "codec/rate/choose.h"
#include "codec/rate/compress_plan.h"
#include "tests/codec/cuda/device_stream.h"
#include "tests/codec/cuda/raw_stream_file.h"

namespace {

using epk::cuda::DecodeJob;
using epk::cuda::DecodePlan;
using epk::cuda::OutputFormat;
using epk::testing::DeviceBuffer;
using epk::testing::DeviceStream;
using epk::testing::RawStream;

struct Row {
  std::string name, variant;  // variant: the output format and the kernel the plan took
  double us = 0, min_us = 0, out_gbs = 0, ref_us = 0, copy_us = 0, bpp = 0;
  std::string exact;
};
std::vector<Row> g_rows;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void die(const epk::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.to_string().c_str());
  std::exit(1);
}

template <class F>
std::vector<double> time_runs(int warmup, int runs, cudaStream_t stream, F&& body) {
  cudaEvent_t a, b;
  EPK_CUDA_CHECK(cudaEventCreate(&a));
  EPK_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < warmup; ++i) body(i);
  // Warm up by time too (at least 150 ms of back-to-back runs), so the clocks have ramped up before timing.
  if (warmup > 0) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(150);
    for (int i = 0; std::chrono::steady_clock::now() < until; ++i) {
      for (int k = 0; k < 16; ++k) body(i * 16 + k);
      EPK_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
  }
  std::vector<double> us;
  for (int i = 0; i < runs; ++i) {
    EPK_CUDA_CHECK(cudaEventRecord(a, stream));
    body(i);
    EPK_CUDA_CHECK(cudaEventRecord(b, stream));
    EPK_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    EPK_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    us.push_back(ms * 1000.0);
  }
  EPK_CUDA_CHECK(cudaEventDestroy(a));
  EPK_CUDA_CHECK(cudaEventDestroy(b));
  return us;
}

double copy_us(std::size_t bytes, int copies, int runs, cudaStream_t stream) {
  std::vector<DeviceBuffer> src, dst;
  for (int i = 0; i < copies; ++i) {
    src.emplace_back(bytes);
    dst.emplace_back(bytes);
    EPK_CUDA_CHECK(cudaMemset(src.back().get(), 0x3c, bytes));
  }
  auto us = time_runs(5, runs, stream, [&](int i) {
    EPK_CUDA_CHECK(cudaMemcpyAsync(dst[i % copies].get(), src[i % copies].get(), bytes, cudaMemcpyDeviceToDevice,
                                   stream));
  });
  return median(us);
}

std::map<std::string, double> read_ref_times(const std::string& path) {
  std::map<std::string, double> m;
  std::ifstream in(path);
  std::string name;
  double us;
  while (in >> name >> us) m[name] = us;
  return m;
}

double stored_bpp(const RawStream& r) {
  const double bytes = r.payload.size() * 2.0 + r.offsets.size() * 4.0 + r.states.size() * 4.0 + 17 * 16 +
                       r.freq_tables.size() * 2.0 + r.scales.size() * 4.0 + 24;
  return bytes * 8.0 / (double(r.rows) * r.cols);
}

// One tensor, several copies (rotated so inputs + outputs exceed L2), each output format.
// `overrides`: the plan's own choices by default; a forced placement the tensor does not fit is reported and skipped.
void bench_tensor(const std::string& name, const RawStream& raw, const std::vector<OutputFormat>& formats, int runs,
                  double ref_us, std::size_t l2, cudaStream_t stream,
                  const epk::cuda::detail::PlanOverrides& overrides = {}) {
  const epk::rans::LatticeRansStream s = raw.view();
  const std::size_t in_bytes = raw.payload.size() * 2 + raw.states.size() * 4;
  const std::size_t out_max = std::size_t{s.rows} * s.cols * 4;
  const int copies = static_cast<int>(std::clamp<std::size_t>((3 * l2) / (in_bytes + out_max / 2) + 1, 2, 8));
  std::vector<std::unique_ptr<DeviceStream>> devs;
  std::vector<DeviceBuffer> outs, scales;
  for (int c = 0; c < copies; ++c) {
    devs.push_back(std::make_unique<DeviceStream>(s));
    outs.emplace_back(out_max);
    scales.emplace_back(std::size_t{s.rows} * 4);
  }
  const double copy = copy_us(std::size_t{s.rows} * s.cols * 2, copies, runs, stream);
  for (OutputFormat format : formats) {
    std::vector<DecodePlan> plans;
    std::vector<DeviceBuffer> scratch;
    for (int c = 0; c < copies; ++c) {
      DecodeJob job{name, &s, devs[c]->buffers(), 0, 0, format, outs[c].get(), scales[c].get<float>()};
      auto plan = DecodePlan::create({&job, 1}, {}, overrides);
      if (!plan && overrides.lut_mode >= 0) {
        std::printf("%-22s forced placement %d: %s\n", name.c_str(), overrides.lut_mode, plan.error().message.c_str());
        return;
      }
      if (!plan) die(plan.error());
      scratch.emplace_back(plan->scratch_bytes());
      if (auto st = epk::cuda::upload(*plan, scratch.back().get(), scratch.back().bytes(), stream); !st) {
        die(st.error());
      }
      plans.push_back(std::move(*plan));
    }
    // Correctness first: poison, decode, status, compare with the reference package's output where stored.
    EPK_CUDA_CHECK(cudaMemset(outs[0].get(), 0xAB, out_max));
    if (auto st = epk::cuda::decode(plans[0], scratch[0].get(), stream); !st) die(st.error());
    std::string exact = "-";
    if (auto st = epk::cuda::read_status(plans[0], scratch[0].get(), stream); !st) {
      exact = "CORRUPT " + st.error().message;
    } else if (auto it = raw.outputs.find(static_cast<std::uint32_t>(format)); it != raw.outputs.end()) {
      std::vector<std::uint8_t> got(it->second.size());
      EPK_CUDA_CHECK(cudaMemcpy(got.data(), outs[0].get(), got.size(), cudaMemcpyDeviceToHost));
      std::size_t diff = got.size();
      for (std::size_t i = 0; i < got.size(); ++i) {
        if (got[i] != it->second[i]) {
          diff = i;
          break;
        }
      }
      exact = diff == got.size() ? "yes" : "NO@" + std::to_string(diff);
    }
    auto us = time_runs(10, runs, stream, [&](int i) {
      if (auto st = epk::cuda::decode(plans[i % copies], scratch[i % copies].get(), stream); !st) die(st.error());
    });
    Row r;
    r.name = name;
    r.variant = std::string(epk::cuda::output_format_name(format)) + " " + plans[0].kernel_name() + " w" +
                std::to_string(plans[0].warps_per_block()) + " b" + std::to_string(plans[0].blocks());
    r.us = median(us);
    r.min_us = *std::min_element(us.begin(), us.end());
    r.out_gbs = double(plans[0].output_bytes()) / (r.us * 1e3);
    r.ref_us = ref_us;
    r.copy_us = copy;
    r.bpp = stored_bpp(raw);
    r.exact = exact;
    std::printf("%-22s %-44s median %8.1f us  min %8.1f  %7.1f GB/s out  exact %s\n", r.name.c_str(),
                r.variant.c_str(), r.us, r.min_us, r.out_gbs, exact.c_str());
    std::fflush(stdout);
    g_rows.push_back(r);
  }
}

// The host tier's two reads of one tensor's inputs (docs/decisions/client-side-decode.md): the decoder reading them in
// place from pinned host memory over PCIe, against a copy to the device first and the decode from there (copy and
// decode on one stream, as epkd's lanes run them); the decode from device memory beside both. Inputs laid out as in a
// tier (each buffer 256-byte aligned), one copy of them; every variant's output compared with the device decode's.
void bench_host_inputs(const std::string& name, const RawStream& raw, int runs, cudaStream_t stream) {
  const epk::rans::LatticeRansStream s = raw.view();
  auto align = [](std::size_t v) { return (v + 255) / 256 * 256; };
  const std::size_t payload_bytes = (s.payload.size() + 8) / 8 * 16;  // as DeviceStream pads it
  const std::size_t at_offsets = align(payload_bytes), at_states = at_offsets + align(s.offsets.size_bytes());
  const std::size_t at_scales = at_states + align(s.states.size_bytes());
  const std::size_t total = at_scales + align(s.scales.size_bytes());
  void* host = nullptr;
  EPK_CUDA_CHECK(cudaHostAlloc(&host, total, cudaHostAllocMapped));
  auto* h = static_cast<std::uint8_t*>(host);
  std::memset(h, 0, total);
  std::memcpy(h, s.payload.data(), s.payload.size_bytes());
  std::memcpy(h + at_offsets, s.offsets.data(), s.offsets.size_bytes());
  std::memcpy(h + at_states, s.states.data(), s.states.size_bytes());
  std::memcpy(h + at_scales, s.scales.data(), s.scales.size_bytes());
  DeviceBuffer staging(total);
  auto buffers_at = [&](const std::uint8_t* base) {
    return epk::cuda::DeviceBuffers{reinterpret_cast<const std::uint16_t*>(base),
                                    reinterpret_cast<const std::uint32_t*>(base + at_offsets),
                                    reinterpret_cast<const std::uint32_t*>(base + at_states),
                                    reinterpret_cast<const float*>(base + at_scales)};
  };
  void* host_dev = nullptr;  // the same address under unified addressing; asked for all the same
  EPK_CUDA_CHECK(cudaHostGetDevicePointer(&host_dev, host, 0));
  const DeviceStream dev(s);
  const std::size_t out_bytes = std::size_t{s.rows} * s.cols * 2;
  DeviceBuffer out(out_bytes), ref_out(out_bytes);
  struct Variant {
    const char* what;
    epk::cuda::DeviceBuffers in;
    bool copy_first;
  };
  const Variant variants[] = {{"device", dev.buffers(), false},
                              {"host in place", buffers_at(static_cast<const std::uint8_t*>(host_dev)), false},
                              {"host staged (copy + decode)", buffers_at(staging.get<const std::uint8_t>()), true}};
  std::vector<std::uint8_t> want(out_bytes), got(out_bytes);
  for (const Variant& v : variants) {
    DecodeJob job{name, &s, v.in, 0, 0, OutputFormat::kBf16, out.get(), nullptr};
    auto plan = DecodePlan::create({&job, 1});
    if (!plan) die(plan.error());
    DeviceBuffer scratch(plan->scratch_bytes());
    if (auto st = epk::cuda::upload(*plan, scratch.get(), scratch.bytes(), stream); !st) die(st.error());
    auto body = [&](int) {
      if (v.copy_first) EPK_CUDA_CHECK(cudaMemcpyAsync(staging.get(), host, total, cudaMemcpyHostToDevice, stream));
      if (auto st = epk::cuda::decode(*plan, scratch.get(), stream); !st) die(st.error());
    };
    EPK_CUDA_CHECK(cudaMemsetAsync(out.get(), 0xAB, out_bytes, stream));
    body(0);
    if (auto st = epk::cuda::read_status(*plan, scratch.get(), stream); !st) die(st.error());
    EPK_CUDA_CHECK(cudaMemcpy(got.data(), out.get(), out_bytes, cudaMemcpyDeviceToHost));
    if (&v == &variants[0]) want = got;
    const char* exact = got == want ? "yes" : "NO";
    const double us = median(time_runs(5, runs, stream, body));
    std::printf("%-22s inputs %-28s median %8.1f us  (%.2f MB of inputs)  same bytes as the device decode: %s\n",
                name.c_str(), v.what, us, total / 1e6, exact);
    Row r;
    r.name = name;
    r.variant = std::string("bf16, inputs ") + v.what;
    r.us = us;
    r.out_gbs = double(out_bytes) / (us * 1e3);
    r.exact = exact;
    g_rows.push_back(r);
  }
  const double copy = median(time_runs(5, runs, stream, [&](int) {
    EPK_CUDA_CHECK(cudaMemcpyAsync(staging.get(), host, total, cudaMemcpyHostToDevice, stream));
  }));
  std::printf("%-22s the copy alone: median %8.1f us (%.1f GB/s)\n", name.c_str(), copy, total / (copy * 1e3));
  EPK_CUDA_CHECK(cudaFreeHost(host));
}

// 32 layers x 7 linear weights, each layer's copy in its own device buffers, decoded one layer per launch.
void bench_stack(const std::map<std::string, RawStream>& parts, int passes, cudaStream_t stream) {
  const char* names[] = {"q4096x4096_4bpp", "k1024x4096_4bpp", "v1024x4096_4bpp", "o4096x4096_4bpp",
                         "gate14336x4096_4bpp", "up14336x4096_4bpp", "down4096x14336_4bpp"};
  std::vector<epk::rans::LatticeRansStream> views;
  for (const char* n : names) {
    auto it = parts.find(n);
    if (it == parts.end()) {
      std::printf("stack: missing %s, skipped\n", n);
      return;
    }
    views.push_back(it->second.view());
  }
  constexpr int kLayers = 32;
  std::vector<std::unique_ptr<DeviceStream>> devs;
  std::vector<DeviceBuffer> outs, scratch;
  std::vector<DecodePlan> plans;
  std::uint64_t out_bytes = 0, in_bytes = 0;
  for (int l = 0; l < kLayers; ++l) {
    std::vector<DecodeJob> jobs;
    for (std::size_t t = 0; t < views.size(); ++t) {
      devs.push_back(std::make_unique<DeviceStream>(views[t]));
      outs.emplace_back(std::size_t{views[t].rows} * views[t].cols * 2);
      jobs.push_back({"layers." + std::to_string(l) + "." + names[t], &views[t], devs.back()->buffers(), 0, 0,
                      OutputFormat::kBf16, outs.back().get(), nullptr});
    }
    auto plan = DecodePlan::create(jobs);
    if (!plan) die(plan.error());
    scratch.emplace_back(plan->scratch_bytes());
    if (auto st = epk::cuda::upload(*plan, scratch.back().get(), scratch.back().bytes(), stream); !st) die(st.error());
    out_bytes += plan->output_bytes();
    in_bytes += plan->compressed_bytes();
    plans.push_back(std::move(*plan));
  }
  auto whole = time_runs(1, passes, stream, [&](int) {
    for (int l = 0; l < kLayers; ++l) {
      if (auto st = epk::cuda::decode(plans[l], scratch[l].get(), stream); !st) die(st.error());
    }
  });
  for (int l = 0; l < kLayers; ++l) {
    if (auto st = epk::cuda::read_status(plans[l], scratch[l].get(), stream); !st) die(st.error());
  }
  std::vector<double> per_layer;
  for (int pass = 0; pass < 3; ++pass) {
    for (int l = 0; l < kLayers; ++l) {
      auto us = time_runs(0, 1, stream, [&](int) {
        if (auto st = epk::cuda::decode(plans[l], scratch[l].get(), stream); !st) die(st.error());
      });
      per_layer.push_back(us[0]);
    }
  }
  const double total = median(whole);
  std::printf("stack 32x7 (8B-class): %.3f ms total (median of %d passes), %.1f GB/s bf16 out, %.1f GB/s "
              "compressed in, per layer median %.1f us (%d tiles/layer, %zu blocks, w%u, %s)\n",
              total / 1000.0, passes, out_bytes / (total * 1e3), in_bytes / (total * 1e3), median(per_layer),
              static_cast<int>(plans[0].tiles()), plans[0].blocks(), plans[0].warps_per_block(),
              plans[0].kernel_name().c_str());
  Row r;
  r.name = "stack32x7_4bpp";
  r.variant = "bf16 " + plans[0].kernel_name() + ", per layer";
  r.us = median(per_layer);
  r.out_gbs = out_bytes / (total * 1e3);
  r.exact = "total " + std::to_string(total / 1000.0) + " ms";
  g_rows.push_back(r);
}

// The tensor of `seed` (bench/gaussian_bf16.h) as little-endian bf16 bytes, on the host's threads.
std::vector<std::byte> gaussian_bf16(std::uint32_t rows, std::uint32_t cols, std::uint64_t seed) {
  const std::uint64_t n = std::uint64_t(rows) * cols;
  std::vector<std::byte> out(n * 2);
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (std::uint64_t i = t; i < n; i += threads) {
        const std::uint16_t b = epk::bench::gaussian_bf16_at(seed, i);
        std::memcpy(out.data() + i * 2, &b, 2);
      }
    });
  }
  for (auto& th : pool) th.join();
  return out;
}

// One tensor encoded by the device encoder in `profile` at `bpp` with tiles `multiple` times the default length; its
// bf16 decode by the CPU decoder is the output the GPU's is checked against.
RawStream encode_as(epk::rate::TensorEncoder& encoder, const std::string& name, std::uint32_t rows, std::uint32_t cols,
                    double bpp, epk::rans::StreamProfile profile, std::uint32_t multiple, std::uint64_t seed) {
  const auto weights = gaussian_bf16(rows, cols, seed);
  const int threads = int(std::max(1u, std::thread::hardware_concurrency()));
  epk::rate::EncodeOptions o = epk::rate::packer_encode_options(bpp, 0, threads);
  o.tile_symbols = epk::model::default_tile_symbols(bpp) * multiple;
  epk::rans::EncodingInfo info = epk::rate::packer_encoding_info(bpp, 0);
  o.profile = profile;
  info.profile = profile;
  auto p = epk::rate::pack_tensor(encoder, weights, rows, cols, epk::DType::kBF16, o, epk::rate::ChoicePolicy{}, info,
                                  name);
  if (!p) die(p.error());
  if (p->choice.form != epk::rate::Form::kLatticeRans) {
    std::fprintf(stderr, "%s: stored raw (%s)\n", name.c_str(), p->choice.reason.c_str());
    std::exit(1);
  }
  RawStream r;
  static_cast<epk::rans::EncodedTensor&>(r) = std::move(p->lattice);
  std::vector<std::uint8_t> want(std::size_t{rows} * cols * 2);
  if (auto st = epk::rans::decode(r.view(), name, epk::DType::kBF16, std::as_writable_bytes(std::span(want)), threads);
      !st) {
    die(st.error());
  }
  r.outputs[static_cast<std::uint32_t>(OutputFormat::kBf16)] = std::move(want);
  std::printf("%-22s x%u: %u symbols a tile, %zu tiles, stored %.4f bpp (%s), rel_l2 %.4f%%\n", name.c_str(),
              multiple, r.tile_symbols, r.offsets.size() - 1, p->stored_bpp,
              std::string(epk::rans::profile_name(p->profile)).c_str(), 100.0 * p->rel_l2);
  std::fflush(stdout);
  return r;
}

// --tile-multiples: each tensor and the 8B-class stack in the reference profile, then in the native one at each
// tile length.
int bench_tile_lengths(const std::vector<std::uint32_t>& multiples, double bpp, int runs, std::size_t l2,
                       cudaStream_t stream) {
  auto encoder = epk::cuda::DeviceEncoder::create(0);
  if (!encoder) die(encoder.error());
  struct Shape {
    const char* name;
    std::uint32_t rows, cols;
  };
  const Shape tensors[] = {{"q4096x4096", 4096, 4096}, {"l10240x3840", 10240, 3840}, {"up14336x4096", 14336, 4096},
                           {"up28672x8192", 28672, 8192}};
  const Shape layer[] = {{"q4096x4096_4bpp", 4096, 4096},         {"k1024x4096_4bpp", 1024, 4096},
                         {"v1024x4096_4bpp", 1024, 4096},         {"o4096x4096_4bpp", 4096, 4096},
                         {"gate14336x4096_4bpp", 14336, 4096},    {"up14336x4096_4bpp", 14336, 4096},
                         {"down4096x14336_4bpp", 4096, 14336}};
  auto pass = [&](epk::rans::StreamProfile profile, std::uint32_t m) {
    const std::string suffix = profile == epk::rans::StreamProfile::kReference ? "_ref" : "_x" + std::to_string(m);
    for (std::size_t i = 0; i < std::size(tensors); ++i) {
      const Shape& t = tensors[i];
      const RawStream r = encode_as(**encoder, t.name, t.rows, t.cols, bpp, profile, m, 1 + i);
      const std::string name = std::string(t.name) + suffix;
      bench_tensor(name, r, {OutputFormat::kBf16}, runs, 0, l2, stream);
      if (r.prob_bits > 11) {
        // Where packed tables do not hold the alphabets: the global tables, and two-level at fewer warps a block.
        epk::cuda::detail::PlanOverrides forced;
        forced.lean = false;
        forced.lut_mode = epk::cuda::detail::kWideGlobal;
        bench_tensor(name, r, {OutputFormat::kBf16}, runs, 0, l2, stream, forced);
        forced.lut_mode = epk::cuda::detail::kTwoLevelShared;
        for (std::uint32_t w : {24u, 16u, 8u, 4u}) {
          forced.max_warps_per_block = w;
          bench_tensor(name, r, {OutputFormat::kBf16}, runs, 0, l2, stream, forced);
        }
      }
    }
    std::map<std::string, RawStream> parts;
    for (std::size_t i = 0; i < std::size(layer); ++i) {
      parts[layer[i].name] = encode_as(**encoder, layer[i].name, layer[i].rows, layer[i].cols, bpp, profile, m, 11 + i);
    }
    std::printf("%s, tile length x%u at %.2f bpp: ", std::string(epk::rans::profile_name(profile)).c_str(), m, bpp);
    bench_stack(parts, 10, stream);
  };
  pass(epk::rans::StreamProfile::kReference, 1);
  for (std::uint32_t m : multiples) pass(epk::rans::StreamProfile::kNative, m);
  return 0;
}

// A comma-separated list of integers in 1..max into out; false (named on stderr) on any other entry.
bool parse_list(const char* option, const char* text, int max, std::vector<std::uint32_t>& out) {
  std::stringstream list(text);
  for (std::string item; std::getline(list, item, ',');) {
    const int v = std::atoi(item.c_str());
    if (v < 1 || v > max) {
      std::fprintf(stderr, "%s: %s is not in 1..%d\n", option, item.c_str(), max);
      return false;
    }
    out.push_back(static_cast<std::uint32_t>(v));
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s DATA_DIR [--runs N] [--quick] [--only TENSOR [--max-warps W,..]]\n"
                 "       %s --tile-multiples M,.. [--bpp R] [--runs N]\n",
                 argv[0], argv[0]);
    return 2;
  }
  // DATA_DIR is not needed by --tile-multiples, which encodes its own tensors.
  const bool has_dir = std::strncmp(argv[1], "--", 2) != 0;
  const std::string dir = has_dir ? argv[1] : "";
  int runs = 100;
  std::vector<std::uint32_t> tile_multiples;
  double tile_bpp = 4.0;
  bool quick = false;
  std::string only;  // --only NAME: just that tensor, bf16, no stack (for profilers)
  std::vector<std::uint32_t> max_warps;  // --max-warps W,..: with --only, the tensor again at each cap
  for (int i = has_dir ? 2 : 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else if (std::strcmp(argv[i], "--max-warps") == 0 && i + 1 < argc) {
      if (!parse_list("--max-warps", argv[++i], 32, max_warps)) return 2;
    } else if (std::strcmp(argv[i], "--bpp") == 0 && i + 1 < argc) {
      tile_bpp = std::atof(argv[++i]);
      if (!(tile_bpp >= 1.0 && tile_bpp <= 8.0)) {
        std::fprintf(stderr, "--bpp: %s is not in [1, 8]\n", argv[i]);
        return 2;
      }
    } else if (std::strcmp(argv[i], "--tile-multiples") == 0 && i + 1 < argc) {
      if (!parse_list("--tile-multiples", argv[++i], 16, tile_multiples)) return 2;
    } else {
      std::fprintf(stderr,
                   "unknown argument %s\nusage: %s DATA_DIR [--runs N] [--quick] [--only TENSOR [--max-warps W,..]]\n"
                   "       %s --tile-multiples M,.. [--bpp R] [--runs N]\n",
                   argv[i], argv[0], argv[0]);
      return 2;
    }
  }
  if (!has_dir && tile_multiples.empty()) {
    std::fprintf(stderr, "DATA_DIR is needed unless --tile-multiples is given\n");
    return 2;
  }
  if (epk::cuda::device_count() == 0) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  cudaDeviceProp prop{};
  EPK_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MB, smem/block optin %zu KB\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize >> 20, prop.sharedMemPerBlockOptin >> 10);
  cudaStream_t stream;
  EPK_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const auto ref = read_ref_times(dir + "/ref_times.txt");
  auto ref_of = [&](const std::string& n) {
    auto it = ref.find(n);
    return it == ref.end() ? 0.0 : it->second;
  };

  std::map<std::string, RawStream> loaded;
  auto load = [&](const std::string& n) -> const RawStream* {
    auto r = epk::testing::read_raw_stream(dir + "/" + n + ".epkraw");
    if (!r) {
      std::printf("%s: %s\n", n.c_str(), r.error().to_string().c_str());
      return nullptr;
    }
    return &(loaded[n] = std::move(*r));
  };

  const std::size_t l2 = static_cast<std::size_t>(prop.l2CacheSize);
  if (!tile_multiples.empty()) return bench_tile_lengths(tile_multiples, tile_bpp, runs, l2, stream);

  if (!max_warps.empty() && only.empty()) {
    std::fprintf(stderr, "--max-warps needs --only TENSOR\n");
    return 2;
  }
  if (!only.empty()) {
    if (const RawStream* r = load(only)) {
      bench_tensor(only, *r, {OutputFormat::kBf16}, runs, ref_of(only), l2, stream);
      for (std::uint32_t w : max_warps) {
        epk::cuda::detail::PlanOverrides capped;
        capped.max_warps_per_block = w;
        bench_tensor(only, *r, {OutputFormat::kBf16}, runs, ref_of(only), l2, stream, capped);
      }
    }
    return 0;
  }
  for (const char* n : {"l10240x3840_4bpp", "l10240x3840_2bpp", "l10240x3840_8bpp"}) {
    if (const RawStream* r = load(n)) {
      const bool main_case = std::string(n) == "l10240x3840_4bpp";
      bench_tensor(n, *r,
                   main_case ? std::vector<OutputFormat>{OutputFormat::kBf16, OutputFormat::kFp16, OutputFormat::kFp32,
                                                         OutputFormat::kFp8E4M3, OutputFormat::kInt8Rowwise,
                                                         OutputFormat::kFp8E4M3Rowwise}
                             : std::vector<OutputFormat>{OutputFormat::kBf16},
                   runs, ref_of(n), l2, stream);
      if (main_case) bench_host_inputs(n, *r, runs, stream);
      loaded.erase(n);
    }
  }
  for (const char* n : {"q4096x4096_4bpp", "up14336x4096_4bpp"}) {
    if (const RawStream* r = load(n)) {
      bench_tensor(n, *r, {OutputFormat::kBf16}, runs, ref_of(n), l2, stream);
      if (std::string(n) == "up14336x4096_4bpp") bench_host_inputs(n, *r, runs, stream);
    }
  }
  for (const char* n : {"k1024x4096_4bpp", "v1024x4096_4bpp", "o4096x4096_4bpp", "gate14336x4096_4bpp",
                        "down4096x14336_4bpp"}) {
    load(n);
  }
  bench_stack(loaded, quick ? 3 : 10, stream);

  std::printf("\n%-20s %-40s %9s %9s %8s %9s %9s %6s %s\n", "tensor", "format and kernel", "ours_us", "ref_us",
              "speedup", "copy_us", "GB/s_out", "bpp", "bit-exact");
  for (const Row& r : g_rows) {
    std::printf("%-20s %-40s %9.1f %9.1f %8.2f %9.1f %9.1f %6.2f %s\n", r.name.c_str(), r.variant.c_str(), r.us,
                r.ref_us, r.ref_us > 0 ? r.ref_us / r.us : 0.0, r.copy_us, r.out_gbs, r.bpp, r.exact.c_str());
  }
  EPK_CUDA_CHECK(cudaStreamDestroy(stream));
  return 0;
}
