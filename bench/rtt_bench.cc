// Cache-hit acquire + release round trip from other processes, p50/p99 with N concurrent clients (CPU path).
//
//   epk_bench_rtt --epkd build/default/daemon/epkd --clients 1,16 --iters 20000
//     starts its own epkd (synthetic model, temporary socket), or
//   epk_bench_rtt --socket S --model M --tensor T [--layout L] --clients 16
//     against a running one. `--io-threads N` is passed to the epkd it starts. Each client process connects, acquires
//     once (a miss that fills the cache), then times `iters` acquire+release pairs of the same tensor after all clients
//     are ready. `--epkd-flag F` (repeatable) adds F to that epkd's command line (`--epkd-flag=--spin-us=0`, say).
//     The timed loop uses Client::acquire_into with one kept Tensor (no allocation in libepk); `--by-value` times
//     Client::acquire (a new Tensor per call) instead.
//   Unattended runs: `--timeout-s N` kills every process it started and exits 124 after N seconds; the last line is
//   one summary (`summary: ... c1 p50 .. p99 .. | c16 ... | load a b c`) with the load average before and after.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <csignal>
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
bool g_by_value = false;  // time Client::acquire (a new Tensor per call) instead of acquire_into
int g_client_spin_us = -1;  // ClientOptions::spin_us (-1: EPK_SPIN_US)

// Every process this bench started, for the --timeout-s watchdog (a signal handler may only read a plain array).
constexpr int kMaxChildren = 1024;
volatile pid_t g_children[kMaxChildren];
volatile int g_child_count = 0;
char g_cleanup_dir[256];  // the clients' result directory and the daemon's socket, removed on timeout
char g_cleanup_socket[256];

void remember_child(pid_t pid) {
  const int n = g_child_count;  // volatile: read and written once each (the signal handler reads it)
  if (n < kMaxChildren) {
    g_children[n] = pid;
    g_child_count = n + 1;
  }
}

void on_timeout(int) {
  for (int i = 0; i < g_child_count; ++i) {
    if (g_children[i] > 0) ::kill(g_children[i], SIGKILL);
  }
  if (g_cleanup_socket[0] != 0) ::unlink(g_cleanup_socket);
  // The result files are few and small; the directory goes once they are removed by name (0 .. kMaxChildren).
  if (g_cleanup_dir[0] != 0) {
    char path[300];
    for (int i = 0; i < g_child_count; ++i) {
      int n = 0;
      for (const char* p = g_cleanup_dir; *p != 0 && n < 280; ++p) path[n++] = *p;
      path[n++] = '/';
      char digits[12];
      int d = 0;
      for (int v = i; d == 0 || v > 0; v /= 10) digits[d++] = static_cast<char>('0' + v % 10);
      while (d > 0) path[n++] = digits[--d];
      path[n] = 0;
      ::unlink(path);
    }
    ::rmdir(g_cleanup_dir);
  }
  const char msg[] = "epk_bench_rtt: --timeout-s reached; killed every process it started\n";
  (void)!::write(2, msg, sizeof(msg) - 1);
  ::_exit(124);
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

pid_t g_daemon = -1;  // the epkd this bench started, for its CPU time

// CPU time (user + system) of a process, in ms, from /proc/PID/stat; -1 when unreadable.
double cpu_ms_of(pid_t pid) {
  if (pid <= 0) return -1;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return -1;
  std::size_t close = line.rfind(')');
  if (close == std::string::npos) return -1;
  std::vector<std::string> f;
  std::string cur;
  for (std::size_t i = close + 2; i <= line.size(); ++i) {
    if (i == line.size() || line[i] == ' ') {
      f.push_back(cur);
      cur.clear();
    } else {
      cur += line[i];
    }
  }
  if (f.size() < 13) return -1;  // fields 14 and 15 (utime, stime) are f[11], f[12]
  return (std::stod(f[11]) + std::stod(f[12])) * 1000.0 / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

double children_cpu_ms() {
  rusage ru{};
  ::getrusage(RUSAGE_CHILDREN, &ru);
  auto ms = [](const timeval& t) { return t.tv_sec * 1e3 + t.tv_usec / 1e3; };
  return ms(ru.ru_utime) + ms(ru.ru_stime);
}

struct RoundResult {
  int clients = 0;
  double p50_us = 0, p99_us = 0;
};

int run_client(const std::string& socket, const std::string& model, const std::string& tensor, epk::shm::Layout layout,
               long iters, int ready_fd, int go_fd, const std::string& out_path) {
  epk::client::ClientOptions opts;
  opts.spin_us = g_client_spin_us;
  auto c = epk::client::Client::connect(socket, opts);
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
  epk::client::Tensor t;  // acquire_into reuses it: the timed loop allocates nothing in libepk
  for (long i = 0; i < iters; ++i) {
    auto t0 = Clock::now();
    if (g_by_value) {
      auto v = c->acquire(model, tensor, layout);
      if (!v) return 1;
      t.handle = v->handle;
    } else if (!c->acquire_into(model, tensor, layout, 0, &t)) {
      return 1;
    }
    if (!(g_nowait ? c->release_nowait(t.handle) : c->release(t.handle))) return 1;
    ns[static_cast<std::size_t>(i)] =
        static_cast<std::uint32_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
  }
  std::ofstream(out_path, std::ios::binary)
      .write(reinterpret_cast<const char*>(ns.data()), static_cast<std::streamsize>(ns.size() * sizeof(std::uint32_t)));
  return 0;
}

bool run_round(const std::string& socket, const std::string& model, const std::string& tensor, epk::shm::Layout layout,
               int clients, long iters, RoundResult* result) {
  int ready[2], go[2];
  if (::pipe(ready) != 0 || ::pipe(go) != 0) return false;
  std::string dir = "/tmp/epk_bench_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  std::snprintf(g_cleanup_dir, sizeof(g_cleanup_dir), "%s", dir.c_str());
  std::vector<pid_t> pids;
  for (int i = 0; i < clients; ++i) {
    std::string out = dir + "/" + std::to_string(i);
    pid_t pid = ::fork();
    if (pid == 0) ::_exit(run_client(socket, model, tensor, layout, iters, ready[1], go[0], out));
    pids.push_back(pid);
    remember_child(pid);
  }
  char b;
  for (int i = 0; i < clients; ++i) {
    if (::read(ready[0], &b, 1) != 1) return false;
  }
  const double daemon_cpu0 = cpu_ms_of(g_daemon), clients_cpu0 = children_cpu_ms();
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
  // The clients' CPU includes their connect and warm-up; the daemon's, only the timed part and the clients' exit.
  const double daemon_cpu = cpu_ms_of(g_daemon) - daemon_cpu0, clients_cpu = children_cpu_ms() - clients_cpu0;
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
  if (g_daemon > 0) {
    std::printf("  cpu: epkd %.0f ms (%.2f us per pair, %.2f cores over %.2f s), clients %.0f ms (%.2f cores)\n",
                daemon_cpu, daemon_cpu * 1e3 / static_cast<double>(all.size()), daemon_cpu / 1e3 / secs, secs,
                clients_cpu, clients_cpu / 1e3 / secs);
  }
  std::fflush(stdout);
  *result = {clients, pct(0.50), pct(0.99)};
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"epk_bench_rtt: cache-hit acquire+release round trip latency"};
  std::string epkd, socket, model = "bench", tensor = "t0", layout_name = "dense:bf16", clients_list = "1,16";
  long iters = 20000;
  int io_threads = 0, spin_us = -1;
  std::vector<std::string> epkd_flags;
  bool device_pool = false;
  app.add_option("--epkd", epkd, "start this epkd binary with a synthetic model on a temporary socket");
  app.add_flag("--device-pool", device_pool,
               "with --epkd: let it serve from a device pool where a GPU is usable (default: --cpu, host memfd pools)");
  app.add_flag("--nowait", g_nowait, "time acquire + release_nowait (one round trip) instead of acquire + release");
  app.add_flag("--by-value", g_by_value, "time Client::acquire (a new Tensor per call) instead of acquire_into");
  app.add_option("--io-threads", io_threads, "with --epkd: its --io-threads (0: its default)");
  app.add_option("--spin-us", spin_us, "with --epkd: its --spin-us (io threads poll after activity; -1: its default)");
  app.add_option("--client-spin-us", g_client_spin_us,
                 "each client polls its socket this long before blocking (ClientOptions::spin_us; -1: EPK_SPIN_US)");
  app.add_option("--epkd-flag", epkd_flags, "with --epkd: one more argument for it (repeatable)")->allow_extra_args(false);
  app.add_option("--socket", socket, "a running epkd's socket");
  app.add_option("--model", model);
  app.add_option("--tensor", tensor);
  app.add_option("--layout", layout_name);
  app.add_option("--clients", clients_list, "comma-separated client counts, one round each");
  app.add_option("--iters", iters, "timed pairs per client");
  int timeout_s = 0;
  app.add_option("--timeout-s", timeout_s, "kill everything and exit 124 after this many seconds (0: no limit)");
  CLI11_PARSE(app, argc, argv);
  if (timeout_s > 0) {
    std::signal(SIGALRM, on_timeout);
    ::alarm(static_cast<unsigned>(timeout_s));
  }
  const std::string load_before = load_average();
  std::printf("load average before: %s\n", load_before.c_str());
  auto layout = epk::shm::layout_from_name(layout_name);
  if (!layout) return 2;
  pid_t daemon = -1;
  if (!epkd.empty()) {
    socket = "/tmp/epk_bench_" + std::to_string(::getpid()) + ".sock";
    std::snprintf(g_cleanup_socket, sizeof(g_cleanup_socket), "%s", socket.c_str());
    daemon = ::fork();
    if (daemon == 0) {
      std::string io = std::to_string(io_threads);
      std::vector<const char*> args = {epkd.c_str(), "--socket", socket.c_str(), "--budget-mb", "64",
                                       "--synthetic", "bench=t0:1024x1024", "--log-level", "warn", "--io-threads",
                                       io.c_str()};
      if (!device_pool) args.push_back("--cpu");
      std::string spin = std::to_string(spin_us);
      if (spin_us >= 0) {
        args.push_back("--spin-us");
        args.push_back(spin.c_str());
      }
      for (const std::string& f : epkd_flags) args.push_back(f.c_str());
      args.push_back(nullptr);
      ::execv(epkd.c_str(), const_cast<char* const*>(args.data()));
      ::_exit(127);
    }
    remember_child(daemon);
    g_daemon = daemon;
    // The readiness probe connects from a child process: a Client of device pools initialises CUDA, and a process
    // that has done so cannot hand CUDA to the client processes it forks afterwards.
    auto ready = [&] {
      const pid_t probe = ::fork();
      if (probe == 0) ::_exit(epk::client::Client::connect(socket) ? 0 : 1);
      int status = 0;
      return probe > 0 && ::waitpid(probe, &status, 0) == probe && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    };
    for (int i = 0; i < 500 && !ready(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  bool ok = true;
  std::size_t start = 0;
  std::vector<RoundResult> results;
  for (;;) {
    std::size_t comma = clients_list.find(',', start);
    int n = std::stoi(clients_list.substr(start, comma - start));
    RoundResult r;
    if (run_round(socket, model, tensor, *layout, n, iters, &r)) {
      results.push_back(r);
    } else {
      ok = false;
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::string summary = std::string("summary: ") + (g_nowait ? "acquire+release_nowait" : "acquire+release") +
                        " iters " + std::to_string(iters) + " io-threads " + std::to_string(io_threads) +
                        " spin-us " + std::to_string(spin_us) + " client-spin-us " + std::to_string(g_client_spin_us);
  if (device_pool) summary += " device-pool";
  for (const std::string& f : epkd_flags) summary += " " + f;
  for (const RoundResult& r : results) {
    char part[96];
    std::snprintf(part, sizeof(part), " | c%d p50 %.1f us p99 %.1f us", r.clients, r.p50_us, r.p99_us);
    summary += part;
  }
  summary += " | load before " + load_before + " after " + load_average() + (ok ? "" : " | A ROUND FAILED");
  if (daemon > 0) {
    // The cost of an idle daemon (its io threads must block, spin or not): CPU over one quiet second.
    const double before = cpu_ms_of(daemon);
    std::this_thread::sleep_for(std::chrono::seconds(1));
    std::printf("epkd idle for 1 s after the last round: %.0f ms CPU\n", cpu_ms_of(daemon) - before);
  }
  std::printf("%s\n", summary.c_str());
  if (daemon > 0) {
    ::kill(daemon, SIGTERM);
    ::waitpid(daemon, nullptr, 0);
  }
  return ok ? 0 : 1;
}
