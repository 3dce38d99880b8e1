// Uncached acquire of intq "int" tensors from epkd's device lane, produced by the device kernels (codec/serve/intq_device_form.h).
// Each of --n tensors is acquired once per layout (every acquire a miss), measured from the acquire request until
// the slot's decode-done event has completed (acquire, wait(t, nullptr), cuEventSynchronize), then released.
//
//   gpu_intq_acquire_bench --epkd PATH [--rows 4096 --cols 14336 --bits 4 --group 128 --n 6]
//     [--layouts gptq,dense:bf16]
// rows = K (in_features), cols = N (out_features); codes and zeros uniform (no zero point of 0), f16 scales.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "bench/timing.h"
#include "client/client.h"
#include "codec/common/half.h"
#include "codec/container/writer.h"
#include "codec/layouts/intq_io.h"
#include "shm/cuda_event.h"
#include "shm/device_pool.h"
#include "shm/layout.h"

namespace {

using epk::bench::Clock;
using epk::bench::pct;
using epk::bench::us_since;

int die(const std::string& m) {
  std::fprintf(stderr, "gpu_intq_acquire_bench: %s\n", m.c_str());
  return 1;
}

epk::layouts::QuantTensor make_tensor(int bits, std::int64_t rows, std::int64_t cols, std::int64_t group,
                                      std::uint64_t seed) {
  epk::layouts::QuantTensor t = epk::layouts::make_quant_tensor(bits, rows, cols, group);
  std::mt19937_64 rng(seed);
  const std::uint8_t mask = static_cast<std::uint8_t>((1u << bits) - 1);
  for (std::size_t i = 0; i < t.codes.size(); i += 8) {
    std::uint64_t r = rng();
    for (std::size_t j = i; j < std::min(t.codes.size(), i + 8); ++j, r >>= 8) t.codes[j] = r & mask;
  }
  for (auto& s : t.scales) s = epk::f16_to_f32(epk::f32_to_f16(std::ldexp(static_cast<float>(rng() % 2000 + 1), -14)));
  for (auto& z : t.zeros) z = static_cast<std::int32_t>(rng() % mask) + 1;  // 1..mask: GPTQ v1 stores every one
  return t;
}

struct Epkd {
  pid_t pid = -1;
  ~Epkd() {
    if (pid > 0) {
      ::kill(pid, SIGTERM);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"uncached intq acquires from epkd's device lane: device kernels vs the CPU path"};
  std::string epkd, layout_list = "gptq,dense:bf16";
  std::int64_t rows = 4096, cols = 14336, group = 128;
  int bits = 4, n = 6;
  app.add_option("--epkd", epkd, "the epkd binary")->required();
  app.add_option("--rows", rows, "K (in_features)");
  app.add_option("--cols", cols, "N (out_features)");
  app.add_option("--bits", bits);
  app.add_option("--group", group);
  app.add_option("--n", n, "tensors (uncached acquires per layout and path)");
  app.add_option("--layouts", layout_list, "comma-separated serving layouts");
  CLI11_PARSE(app, argc, argv);
  if (!epk::shm::cuda_device_available(0)) {
    std::printf("no CUDA device: nothing to measure\n");
    return 0;
  }
  std::vector<epk::shm::Layout> layouts;
  {
    std::stringstream ss(layout_list);
    std::string name;
    while (std::getline(ss, name, ',')) {
      auto l = epk::shm::layout_from_name(name);
      if (!l) return die("unknown layout " + name);
      layouts.push_back(*l);
    }
  }

  auto dir = std::filesystem::temp_directory_path() / ("epk_gpu_intq_bench_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "q.epk").string();
  auto t_enc = Clock::now();
  {
    auto w = epk::container::Writer::create(path, {{"source", "gpu_intq_acquire_bench"}});
    if (!w) return die(w.error().to_string());
    for (int i = 0; i < n; ++i) {
      auto e = epk::layouts::intq::encode_int(make_tensor(bits, rows, cols, group, 1000 + i), "t" + std::to_string(i),
                                              epk::DType::kBF16, "gptq", epk::layouts::intq::CodeForm::kPacked);
      if (!e) return die(e.error().to_string());
      if (auto st = w->add_tensor(e->spec, e->buffers()); !st) return die(st.error().to_string());
    }
    if (auto st = w->finish(); !st) return die(st.error().to_string());
  }
  std::printf("wrote %d intq tensors %lldx%lld %d-bit g%lld (%.1f MiB) in %.1f s\n", n, static_cast<long long>(rows),
              static_cast<long long>(cols), bits, static_cast<long long>(group),
              static_cast<double>(std::filesystem::file_size(path)) / 1048576.0, us_since(t_enc) / 1e6);
  // Every slot of every layout stays cached: the budget holds them all (dense bf16 is the largest, 2 bytes a weight).
  const std::uint64_t per = static_cast<std::uint64_t>(rows) * static_cast<std::uint64_t>(cols) * 2;
  const std::string budget = std::to_string((per * std::uint64_t(n) * layouts.size() >> 20) + 256);

  const std::string sock = (dir / "epkd.sock").string();
  Epkd d;
  d.pid = ::fork();
  if (d.pid == 0) {
    const std::string model_arg = "q=" + path;
    std::vector<const char*> args = {epkd.c_str(), "--socket", sock.c_str(), "--budget-mb", budget.c_str(),
                                     "--log-level", "info", "--model", model_arg.c_str(), nullptr};
    ::execv(epkd.c_str(), const_cast<char* const*>(args.data()));
    ::_exit(127);
  }
  auto t_up = Clock::now();
  epk::Result<epk::client::Client> c = epk::make_error(epk::ErrorCode::kIo, "not connected");
  for (int i = 0; i < 6000 && !c; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    c = epk::client::Client::connect(sock);
  }
  if (!c) return die("epkd did not come up: " + c.error().to_string());
  if (c->pools().empty() || c->pools()[0].kind != epk::shm::PoolKind::kDevice) return die("no device pool");
  auto st = c->stats();
  std::printf("epkd up in %.2f s, resident %.1f MiB\n", us_since(t_up) / 1e6,
              st ? static_cast<double>(st->resident_bytes) / 1048576.0 : -1.0);
  for (epk::shm::Layout l : layouts) {
    std::vector<double> total, reply;
    std::uint64_t bytes = 0;
    for (int i = 0; i < n; ++i) {
      auto t0 = Clock::now();
      auto t = c->acquire("q", "t" + std::to_string(i), l);
      if (!t) return die(t.error().to_string());
      const double r = us_since(t0);
      if (auto s = c->wait(*t, nullptr); !s) return die(s.error().to_string());
      if (auto s = epk::shm::event_synchronize(t->event); !s) return die(s.error().to_string());
      total.push_back(us_since(t0));
      reply.push_back(r);
      bytes = t->bytes;
      if (auto s = c->release(t->handle); !s) return die(s.error().to_string());
    }
    std::printf("  %-11s slot %.1f MiB: uncached acquire until event p50 %.1f us (min %.1f, max %.1f); "
                "reply p50 %.1f us; n %d\n",
                std::string(epk::shm::layout_name(l)).c_str(), static_cast<double>(bytes) / 1048576.0,
                pct(total, 0.5), pct(total, 0.0), pct(total, 1.0), pct(reply, 0.5), n);
  }
  c = epk::make_error(epk::ErrorCode::kIo, "done");  // the client goes, then epkd, then their files
  ::kill(d.pid, SIGTERM);
  ::waitpid(d.pid, nullptr, 0);
  d.pid = -1;
  std::filesystem::remove_all(dir);
  return 0;
}
