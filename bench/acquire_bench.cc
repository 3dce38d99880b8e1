// Uncached acquire through epkd against the bare CPU decode of the same tensor (CPU path): the CPU analogue of
// issue 6's H200 target (an uncached acquire within 1.5x of the bare decode plus one socket round trip).
//
//   epk_bench_acquire --epkd build/default/daemon/epkd --rows 4096 --cols 4096 --bpp 4 [--layout dense:bf16] [--n 5]
//
// Encodes one Gaussian tensor (fixed seed), writes it N times under different names into a temporary .epk file, starts
// epkd on it (one decode thread), then prints: the bare decode (rans::decode, one thread) median; each uncached
// acquire (a miss: decode in epkd + reply) median; the cache-hit acquire+release round trip median; and the ratio.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>
#include <vector>

#include "bench/bench_model.h"
#include "client/client.h"
#include "codec/container/writer.h"
#include "codec/rans/container_io.h"
#include "codec/rans/decoder.h"
#include "codec/rate/encode.h"

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"uncached acquire through epkd vs the bare CPU decode"};
  std::string epkd, layout_name = "dense:bf16";
  std::uint32_t rows = 4096, cols = 4096;
  double bpp = 4.0;
  int n = 5;
  app.add_option("--epkd", epkd, "the epkd binary")->required();
  app.add_option("--rows", rows);
  app.add_option("--cols", cols);
  app.add_option("--bpp", bpp);
  app.add_option("--layout", layout_name);
  app.add_option("--n", n, "uncached acquires (tensors in the file)");
  CLI11_PARSE(app, argc, argv);
  auto layout = epk::shm::layout_from_name(layout_name);
  if (!layout || (*layout != epk::shm::Layout::kDenseBF16 && *layout != epk::shm::Layout::kDenseF32)) {
    std::fprintf(stderr, "--layout: dense:bf16 or dense:fp32\n");
    return 2;
  }
  const epk::DType out_type = *layout == epk::shm::Layout::kDenseBF16 ? epk::DType::kBF16 : epk::DType::kF32;

  auto dir = std::filesystem::temp_directory_path() / ("epk_acquire_bench_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string path = (dir / "m.epk").string(), sock = (dir / "s.sock").string();
  auto enc = epk::bench::write_gaussian_model(path, rows, cols, bpp, n, 2);
  if (!enc) {
    std::fprintf(stderr, "%s\n", enc.error().to_string().c_str());
    return 1;
  }

  std::vector<std::byte> out(std::size_t(rows) * cols * (epk::dtype_bits(out_type) / 8));
  std::vector<double> bare;
  for (int i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    if (!epk::rans::decode(enc->view(), "w", out_type, out, 1)) return 1;
    bare.push_back(ms_since(t0));
  }

  const std::string budget = std::to_string((out.size() * std::size_t(n) >> 20) + 16);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execl(epkd.c_str(), epkd.c_str(), "--socket", sock.c_str(), "--budget-mb", budget.c_str(), "--cpu", "--threads",
            "1", "--io-threads", "1", "--log-level", "warn", "--model", ("m=" + path).c_str(), nullptr);
    ::_exit(127);
  }
  epk::Result<epk::client::Client> c = epk::make_error(epk::ErrorCode::kIo, "not connected");
  for (int i = 0; i < 500 && !c; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    c = epk::client::Client::connect(sock);
  }
  if (!c) return 1;
  std::vector<double> miss, hit;
  for (int i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    auto t = c->acquire("m", "t" + std::to_string(i), *layout);
    miss.push_back(ms_since(t0));
    if (!t || !c->release(t->handle)) return 1;
  }
  for (int i = 0; i < 2000; ++i) {
    auto t0 = Clock::now();
    auto t = c->acquire("m", "t0", *layout);
    if (!t || !c->release(t->handle)) return 1;
    hit.push_back(ms_since(t0));
  }
  c->disconnect();
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  std::filesystem::remove_all(dir);
  const double b = median(bare), m = median(miss), h = median(hit);
  std::printf("%ux%u at %.1f bpp to %s, %d tensors, 1 decode thread\n", rows, cols, bpp, layout_name.c_str(), n);
  std::printf("bare decode (rans::decode)      median %9.3f ms\n", b);
  std::printf("uncached acquire through epkd   median %9.3f ms\n", m);
  std::printf("cache-hit acquire+release       median %9.3f ms\n", h);
  std::printf("uncached / (bare + round trip)  %.3f\n", m / (b + h));
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
