// The device path of epkd (the uncached and cache-hit acquire targets), in one run:
//   - bare decode: codec/cuda's one kernel on the same tensor in this process (decode + stream sync, wall clock);
//   - one socket round trip (a stats request);
//   - uncached acquire of a tensor until its decode-done event completes, the target's measure: acquire, wait()
//     (epkd's status ticket, read on the CPU), then cuEventSynchronize on the opened event; against bare + round
//     trip. Beside it, on the other half of the tensors, what a stream-ordered consumer sees: acquire, wait() on a
//     stream of this process, synchronise that stream;
//   - cache-hit acquire + release (CUDA event fence) p50/p99 with 1 and 16 client threads (one Client each).
//
//   gpu_acquire_bench --epkd PATH [--rows 10240 --cols 3840 --bpp 4 --n 6 --iters 2000] [--spin-us N]
//     [--client-spin-us N] [--io-threads N] [--timeline] [--miss-release event|host]
//   --miss-release: how each miss is released (event: release_after, a CUDA event fence; host: release).
//   --timeline runs epkd at debug level: it logs each uncached acquire's way through it ("timeline slot ...", on
//   stderr, steady_clock ns) and the bench prints the client's side of each (same clock) to match them.
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
#include "bench/timing.h"
#include "client/client.h"
#include "codec/container/writer.h"
#include "codec/cuda/decode/decode.h"
#include "codec/rans/container_io.h"
#include "codec/rate/encode.h"
#include "shm/cuda_event.h"
#include "shm/device_pool.h"

namespace {

using epk::bench::Clock;
using epk::bench::pct;
using epk::bench::us_since;

int die(const std::string& m) {
  std::fprintf(stderr, "gpu_acquire_bench: %s\n", m.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"epkd's device path: uncached acquire vs bare kernel + round trip; cache-hit latency"};
  std::string epkd;
  std::uint32_t rows = 10240, cols = 3840;
  double bpp = 4.0;
  int n = 6, iters = 2000;
  app.add_option("--epkd", epkd, "the epkd binary")->required();
  app.add_option("--rows", rows);
  app.add_option("--cols", cols);
  app.add_option("--bpp", bpp);
  app.add_option("--n", n, "uncached acquires (tensors in the file)");
  app.add_option("--iters", iters, "cache-hit round trips per client");
  int spin_us = -1, io_threads = 0;
  bool timeline = false;
  epk::client::ClientOptions copts;
  app.add_option("--spin-us", spin_us, "epkd's --spin-us (-1: its default)");
  app.add_option("--client-spin-us", copts.spin_us, "ClientOptions::spin_us of every client (-1: EPK_SPIN_US)");
  app.add_option("--io-threads", io_threads, "epkd's --io-threads (0: its default, half the cores)");
  int tier_budget_mb = -1;
  app.add_option("--tier-budget-mb", tier_budget_mb,
                 "epkd's --tier-budget-mb (-1: its default, no limit; 0: the tier in host memory, each miss copied "
                 "to the device first)");
  app.add_option("--status-spin-us", copts.status_spin_us, "ClientOptions::status_spin_us (decode status polling)");
  app.add_flag("--timeline", timeline, "epkd at debug level: per-miss timeline lines on stderr");
  std::string miss_release = "event";
  app.add_option("--miss-release", miss_release, "event (release_after) or host (release)")
      ->check(CLI::IsMember({"event", "host"}));
  CLI11_PARSE(app, argc, argv);
  if (!epk::shm::cuda_device_available(0)) {
    std::printf("no CUDA device: nothing to measure\n");
    return 0;
  }

  auto dir = std::filesystem::temp_directory_path() / ("epk_gpu_acquire_bench_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string path = (dir / "m.epk").string(), sock = (dir / "s.sock").string();
  auto t_enc = Clock::now();
  auto enc =
      epk::bench::write_gaussian_model(path, rows, cols, bpp, n, std::max(1u, std::thread::hardware_concurrency()));
  if (!enc) return die(enc.error().to_string());
  std::printf("encoded %ux%u at %.2f bpp target in %.1f s\n", rows, cols, bpp, us_since(t_enc) / 1e6);
  const std::uint64_t out_bytes = std::uint64_t(rows) * cols * 2;

  // Bare decode: the same inputs resident in this process, one kernel per decode.
  std::vector<double> bare;
  {
    const epk::rans::LatticeRansStream s = enc->view();
    auto stream = epk::shm::CudaStream::create(0);
    if (!stream) return die(stream.error().to_string());
    auto dev = [&](const void* p, std::uint64_t bytes, std::uint64_t pad) -> epk::shm::DeviceBuffer {
      auto b = epk::shm::DeviceBuffer::alloc(bytes + pad, 0);
      if (!b) std::exit(die(b.error().to_string()));
      if (pad) (void)epk::shm::fill_device_async(b->address(), 0, bytes + pad, stream->get(), 0);
      if (bytes) (void)epk::shm::copy_to_device_async(b->address(), p, bytes, stream->get(), 0);
      return std::move(*b);
    };
    auto payload = dev(s.payload.data(), s.payload.size_bytes(), 32);
    auto offsets = dev(s.offsets.data(), s.offsets.size_bytes(), 0);
    auto states = dev(s.states.data(), s.states.size_bytes(), 0);
    auto scales = dev(s.scales.data(), s.scales.size_bytes(), 0);
    auto out = dev(nullptr, out_bytes, 0);
    epk::cuda::DecodeJob job;
    job.name = "w";
    job.stream = &s;
    job.dev = {payload.address().as<const std::uint16_t>(), offsets.address().as<const std::uint32_t>(),
               states.address().as<const std::uint32_t>(), scales.address().as<const float>()};
    job.row_end = rows;
    job.format = epk::cuda::OutputFormat::kBf16;
    job.out_dev = out.address().as<void>();
    auto plan = epk::cuda::DecodePlan::create(std::span<const epk::cuda::DecodeJob>(&job, 1));
    if (!plan) return die(plan.error().to_string());
    auto scratch = dev(nullptr, plan->scratch_bytes(), 0);
    auto cs = static_cast<epk::cuda::Stream>(stream->get());
    if (auto st = epk::cuda::upload(*plan, scratch.address().as<void>(), plan->scratch_bytes(), cs); !st)
      return die(st.error().to_string());
    for (int i = 0; i < 220; ++i) {
      auto t0 = Clock::now();
      if (auto st = epk::cuda::decode(*plan, scratch.address().as<void>(), cs); !st)
        return die(st.error().to_string());
      if (auto st = stream->synchronize(); !st) return die(st.error().to_string());
      if (i >= 20) bare.push_back(us_since(t0));
    }
    if (auto st = epk::cuda::read_status(*plan, scratch.address().as<void>(), cs); !st)
      return die(st.error().to_string());
    std::printf("plan: %s, %zu blocks of %u warps; payload %.2f MiB\n", plan->kernel_name().c_str(), plan->blocks(),
                plan->warps_per_block(), static_cast<double>(s.payload.size_bytes()) / 1048576.0);
  }

  const std::string budget = std::to_string((out_bytes * std::uint64_t(n) >> 20) + 64);
  pid_t pid = ::fork();
  if (pid == 0) {
    const std::string model_arg = "m=" + path, io = std::to_string(io_threads), spin = std::to_string(spin_us),
                      tier = std::to_string(tier_budget_mb);
    std::vector<const char*> args = {epkd.c_str(), "--socket", sock.c_str(), "--budget-mb", budget.c_str(),
                                     "--io-threads", io.c_str(), "--log-level", timeline ? "debug" : "warn",
                                     "--model", model_arg.c_str()};
    if (spin_us >= 0) {
      args.push_back("--spin-us");
      args.push_back(spin.c_str());
    }
    if (tier_budget_mb >= 0) {
      args.push_back("--tier-budget-mb");
      args.push_back(tier.c_str());
    }
    args.push_back(nullptr);
    ::execv(epkd.c_str(), const_cast<char* const*>(args.data()));
    ::_exit(127);
  }
  epk::Result<epk::client::Client> c = epk::make_error(epk::ErrorCode::kIo, "not connected");
  for (int i = 0; i < 3000 && !c; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    c = epk::client::Client::connect(sock, copts);
  }
  if (!c) return die("epkd did not come up: " + c.error().to_string());
  const int client_spin = c->spin_us();
  if (c->pools().empty() || c->pools()[0].kind != epk::shm::PoolKind::kDevice) return die("epkd serves no device pool");
  auto stream = epk::shm::CudaStream::create(0);
  if (!stream) return die(stream.error().to_string());

  std::vector<double> rtt;
  for (int i = 0; i < 2000; ++i) {
    auto t0 = Clock::now();
    if (!c->stats()) return die("stats");
    rtt.push_back(us_since(t0));
  }
  // Even tensors: the target's measure (host wait on the event); odd tensors: the stream-ordered consumer.
  std::vector<double> miss, miss_reply, miss_wait, miss_sync, smiss, smiss_reply;
  auto ns_of = [](Clock::time_point t) {
    return static_cast<long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
  };
  auto us_between = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
  };
  for (int i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    auto t = c->acquire("m", "t" + std::to_string(i), epk::shm::Layout::kDenseBF16);
    if (!t) return die(t.error().to_string());
    auto t1 = Clock::now();
    const bool host_wait = i % 2 == 0;
    if (auto st = c->wait(*t, host_wait ? nullptr : stream->get()); !st) return die(st.error().to_string());
    auto t2 = Clock::now();
    if (auto st = host_wait ? epk::shm::event_synchronize(t->event) : stream->synchronize(); !st)
      return die(st.error().to_string());
    auto t3 = Clock::now();
    if (host_wait) {
      miss.push_back(us_between(t0, t3));
      miss_reply.push_back(us_between(t0, t1));
      miss_wait.push_back(us_between(t1, t2));
      miss_sync.push_back(us_between(t2, t3));
    } else {
      smiss.push_back(us_between(t0, t3));
      smiss_reply.push_back(us_between(t0, t1));
    }
    // The client's side of the timeline, on epkd's clock (steady_clock): request sent at `sent` (just before),
    // reply read at `reply`.
    std::printf("client timeline t%d (%s): sent %lld ns, reply %lld ns, waited %lld ns; acquire %.1f us, wait() %.1f "
                "us, %s %.1f us, total %.1f us\n",
                i, host_wait ? "host wait" : "stream wait", ns_of(t0), ns_of(t1), ns_of(t2), us_between(t0, t1),
                us_between(t1, t2), host_wait ? "event sync" : "stream sync", us_between(t2, t3), us_between(t0, t3));
    if (!(miss_release == "event" ? c->release_after(t->handle, stream->get()) : c->release(t->handle)))
      return die("release");
  }
  // fence: true releases with a CUDA event fence (release_after), false with the host fence (release).
  // `rel`: the release call's part of each pair.
  auto hit_loop = [&](epk::client::Client& cl, bool fence, std::vector<double>* lat, std::vector<double>* rel) -> bool {
    for (int i = 0; i < iters; ++i) {
      auto t0 = Clock::now();
      auto t = cl.acquire("m", "t0", epk::shm::Layout::kDenseBF16);
      if (!t) return false;
      auto t1 = Clock::now();
      if (!(fence ? cl.release_after(t->handle, nullptr) : cl.release(t->handle))) return false;
      lat->push_back(us_since(t0));
      rel->push_back(us_since(t1));
    }
    return true;
  };
  std::vector<double> rel1, rel16, hrel1, hrel16;
  auto hits = [&](int clients, bool fence, std::vector<double>* all) -> bool {
    std::vector<double>* rel_all = clients == 1 ? (fence ? &rel1 : &hrel1) : (fence ? &rel16 : &hrel16);
    std::vector<std::vector<double>> lat(clients), rel(clients);
    std::vector<int> ok(clients, 0);
    std::vector<std::thread> th;
    for (int k = 0; k < clients; ++k) {
      th.emplace_back([&, k] {
        auto cl = epk::client::Client::connect(sock, copts);
        ok[k] = cl && hit_loop(*cl, fence, &lat[k], &rel[k]);
      });
    }
    for (auto& t : th) t.join();
    for (int k = 0; k < clients; ++k) {
      if (!ok[k]) return false;
      all->insert(all->end(), lat[k].begin(), lat[k].end());
      rel_all->insert(rel_all->end(), rel[k].begin(), rel[k].end());
    }
    return true;
  };
  std::vector<double> hit1, hit16, host1, host16;
  if (!hits(1, true, &hit1) || !hits(16, true, &hit16) || !hits(1, false, &host1) || !hits(16, false, &host16))
    return die("hit loop");
  auto stats = c->stats();
  c->disconnect();
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  std::filesystem::remove_all(dir);

  const double b = pct(bare, 0.5), r = pct(rtt, 0.5), m = pct(miss, 0.5);
  std::printf("%ux%u at %.1f bpp to dense:bf16, %d tensors, device 0\n", rows, cols, bpp, n);
  std::printf("bare decode kernel (decode + sync)     p50 %9.1f us  min %9.1f us\n", b, pct(bare, 0.0));
  std::printf("socket round trip (stats)              p50 %9.1f us\n", r);
  std::printf("uncached acquire until event complete  p50 %9.1f us  min %9.1f us  max %9.1f us  (host wait, %zu)\n", m,
              pct(miss, 0.0), pct(miss, 1.0), miss.size());
  std::printf("uncached / (bare + round trip)         %.3f   (target <= 1.5)\n", m / (b + r));
  std::printf("uncached, client side: acquire reply p50 %.1f us, wait() p50 %.1f us, event sync p50 %.1f us\n",
              pct(miss_reply, 0.5), pct(miss_wait, 0.5), pct(miss_sync, 0.5));
  std::printf("uncached acquire + wait(stream) + stream sync p50 %.1f us  min %.1f us  (stream wait, %zu; acquire "
              "reply p50 %.1f us)\n",
              pct(smiss, 0.5), pct(smiss, 0.0), smiss.size(), pct(smiss_reply, 0.5));
  std::printf("settings: epkd --spin-us %d --io-threads %d, client spin %d us, status spin %d us, misses released "
              "with %s\n",
              spin_us, io_threads, client_spin, copts.status_spin_us,
              miss_release == "event" ? "release_after (event fence)" : "release (host fence)");
  std::printf("cache-hit acquire+release_after (event fence), 1 client    p50 %7.1f us  p99 %7.1f us\n",
              pct(hit1, 0.5), pct(hit1, 0.99));
  std::printf("cache-hit acquire+release_after (event fence), 16 clients  p50 %7.1f us  p99 %7.1f us\n",
              pct(hit16, 0.5), pct(hit16, 0.99));
  std::printf("cache-hit acquire+release (host fence), 1 client           p50 %7.1f us  p99 %7.1f us\n",
              pct(host1, 0.5), pct(host1, 0.99));
  std::printf("cache-hit acquire+release (host fence), 16 clients         p50 %7.1f us  p99 %7.1f us\n",
              pct(host16, 0.5), pct(host16, 0.99));
  std::printf("release call alone p50 / p99: event fence 1 client %.1f / %.1f us, 16 clients %.1f / %.1f us; host "
              "fence 1 client %.1f / %.1f us, 16 clients %.1f / %.1f us\n",
              pct(rel1, 0.5), pct(rel1, 0.99), pct(rel16, 0.5), pct(rel16, 0.99), pct(hrel1, 0.5), pct(hrel1, 0.99),
              pct(hrel16, 0.5), pct(hrel16, 0.99));
  if (stats) {
    std::printf("epkd: decodes %llu, decode time %.1f us each, resident %.2f MiB\n",
                static_cast<unsigned long long>(stats->decodes),
                stats->decodes ? static_cast<double>(stats->decode_ns) / 1e3 / static_cast<double>(stats->decodes) : 0,
                static_cast<double>(stats->resident_bytes) / 1048576.0);
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
