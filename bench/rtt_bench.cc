// Cache-hit acquire + release round trip from other processes, p50/p99 with N concurrent clients (CPU path).
//
//   epk_bench_rtt --epkd build/default/daemon/epkd --clients 1,16 --iters 20000
//     starts its own epkd (synthetic model, temporary socket), or
//   epk_bench_rtt --socket S --model M --tensor T [--layout L] --clients 16
//     against a running one. `--io-threads N` is passed to the epkd it starts. Each client process connects, acquires
//     once (a miss that fills the cache), then times `iters` acquire+release pairs of the same tensor after all clients
//     are ready.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"

namespace {

using Clock = std::chrono::steady_clock;

bool g_nowait = false;  // release without waiting for the daemon's answer

int run_client(const std::string& socket, const std::string& model, const std::string& tensor, epk::shm::Layout layout,
               long iters, int ready_fd, int go_fd, const std::string& out_path) {
  auto c = epk::client::Client::connect(socket);
  if (!c) {
    std::fprintf(stderr, "client: %s\n", c.error().to_string().c_str());
    return 1;
  }
  auto first = c->acquire(model, tensor, layout);
  if (!first || !c->release(first->handle)) return 1;
  for (int i = 0; i < 200; ++i) {  // warm up
    auto t = c->acquire(model, tensor, layout);
    if (!t || !c->release(t->handle)) return 1;
  }
  char b = 'r';
  if (::write(ready_fd, &b, 1) != 1 || ::read(go_fd, &b, 1) != 1) return 1;
  std::vector<std::uint32_t> ns(static_cast<std::size_t>(iters));
  for (long i = 0; i < iters; ++i) {
    auto t0 = Clock::now();
    auto t = c->acquire(model, tensor, layout);
    if (!t) return 1;
    if (!(g_nowait ? c->release_nowait(t->handle) : c->release(t->handle))) return 1;
    ns[static_cast<std::size_t>(i)] =
        static_cast<std::uint32_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
  }
  std::ofstream(out_path, std::ios::binary)
      .write(reinterpret_cast<const char*>(ns.data()), static_cast<std::streamsize>(ns.size() * sizeof(std::uint32_t)));
  return 0;
}

bool run_round(const std::string& socket, const std::string& model, const std::string& tensor, epk::shm::Layout layout,
               int clients, long iters) {
  int ready[2], go[2];
  if (::pipe(ready) != 0 || ::pipe(go) != 0) return false;
  std::string dir = "/tmp/epk_bench_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  std::vector<pid_t> pids;
  for (int i = 0; i < clients; ++i) {
    std::string out = dir + "/" + std::to_string(i);
    pid_t pid = ::fork();
    if (pid == 0) ::_exit(run_client(socket, model, tensor, layout, iters, ready[1], go[0], out));
    pids.push_back(pid);
  }
  char b;
  for (int i = 0; i < clients; ++i) {
    if (::read(ready[0], &b, 1) != 1) return false;
  }
  auto t0 = Clock::now();
  std::string go_bytes(static_cast<std::size_t>(clients), 'g');
  if (::write(go[1], go_bytes.data(), go_bytes.size()) != static_cast<ssize_t>(go_bytes.size())) return false;
  bool ok = true;
  for (pid_t p : pids) {
    int st = 0;
    ::waitpid(p, &st, 0);
    ok = ok && WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  std::vector<std::uint32_t> all;
  for (int i = 0; i < clients; ++i) {
    std::ifstream in(dir + "/" + std::to_string(i), std::ios::binary);
    std::vector<std::uint32_t> ns(static_cast<std::size_t>(iters));
    in.read(reinterpret_cast<char*>(ns.data()), static_cast<std::streamsize>(ns.size() * 4));
    if (in) all.insert(all.end(), ns.begin(), ns.end());
  }
  std::filesystem::remove_all(dir);
  for (int fd : {ready[0], ready[1], go[0], go[1]}) ::close(fd);
  if (!ok || all.empty()) {
    std::fprintf(stderr, "a client failed\n");
    return false;
  }
  std::sort(all.begin(), all.end());
  auto pct = [&](double p) { return all[std::min(all.size() - 1, static_cast<std::size_t>(p * all.size()))] / 1000.0; };
  std::printf("%s clients %2d  pairs %8zu  p50 %7.1f us  p90 %7.1f us  p99 %7.1f us  max %8.1f us  %9.0f pairs/s\n",
              g_nowait ? "acquire+release_nowait" : "acquire+release", clients, all.size(), pct(0.50), pct(0.90),
              pct(0.99), all.back() / 1000.0, all.size() / secs);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"epk_bench_rtt: cache-hit acquire+release round trip latency"};
  std::string epkd, socket, model = "bench", tensor = "t0", layout_name = "dense:bf16", clients_list = "1,16";
  long iters = 20000;
  int io_threads = 0;
  app.add_option("--epkd", epkd, "start this epkd binary with a synthetic model on a temporary socket");
  app.add_flag("--nowait", g_nowait, "time acquire + release_nowait (one round trip) instead of acquire + release");
  app.add_option("--io-threads", io_threads, "with --epkd: its --io-threads (0: its default)");
  app.add_option("--socket", socket, "a running epkd's socket");
  app.add_option("--model", model);
  app.add_option("--tensor", tensor);
  app.add_option("--layout", layout_name);
  app.add_option("--clients", clients_list, "comma-separated client counts, one round each");
  app.add_option("--iters", iters, "timed pairs per client");
  CLI11_PARSE(app, argc, argv);
  auto layout = epk::shm::layout_from_name(layout_name);
  if (!layout) return 2;
  pid_t daemon = -1;
  if (!epkd.empty()) {
    socket = "/tmp/epk_bench_" + std::to_string(::getpid()) + ".sock";
    daemon = ::fork();
    if (daemon == 0) {
      std::string io = std::to_string(io_threads);
      ::execl(epkd.c_str(), epkd.c_str(), "--socket", socket.c_str(), "--budget-mb", "64", "--cpu", "--synthetic",
              "bench=t0:1024x1024", "--log-level", "warn", "--io-threads", io.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    for (int i = 0; i < 500 && !epk::client::Client::connect(socket); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  bool ok = true;
  std::size_t start = 0;
  for (;;) {
    std::size_t comma = clients_list.find(',', start);
    int n = std::stoi(clients_list.substr(start, comma - start));
    ok = run_round(socket, model, tensor, *layout, n, iters) && ok;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (daemon > 0) {
    ::kill(daemon, SIGTERM);
    ::waitpid(daemon, nullptr, 0);
  }
  return ok ? 0 : 1;
}
