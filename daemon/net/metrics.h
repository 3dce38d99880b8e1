// Prometheus metrics for epkd (opt-in: metrics_listen / --metrics-listen): the text exposition format (0.0.4) over
// HTTP on 127.0.0.1:PORT or a Unix socket path. Names follow Prometheus' naming guide: an `epkd_` prefix, base units
// (bytes, seconds) as suffixes, `_total` on counters.
//
// Scrapes read a snapshot, never the service: the main loop renders the text once a second (one stats() call, the
// same as `epk status` costs) and publishes it; the metrics thread serves whatever was published last. A scrape
// storm therefore takes no cache lock and no io thread from the clients.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "codec/common/result.h"
#include "shm/protocol.h"
#include "shm/unique_fd.h"

namespace epk::daemon {

// Durations in buckets from 10 us to 1 s (1, 2.5, 5 per decade). Not thread-safe: the owner serialises observe()
// and copies (the service does both under its lock).
struct DurationHistogram {
  static constexpr std::array<double, 16> kBoundsSeconds = {1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3,
                                                            5e-3, 1e-2, 2.5e-2, 5e-2, 0.1,  0.25,   0.5,  1.0};
  // The same bounds in nanoseconds: observe() compares integers, so a value on a bound lands in that bucket exactly.
  static constexpr std::array<std::uint64_t, 16> kBoundsNs = {
      10'000,     25'000,     50'000,      100'000,     250'000,     500'000,      1'000'000,   2'500'000,
      5'000'000,  10'000'000, 25'000'000,  50'000'000,  100'000'000, 250'000'000,  500'000'000, 1'000'000'000};
  std::array<std::uint64_t, kBoundsSeconds.size() + 1> counts{};  // per bucket, not cumulative; the last: > 1 s
  std::uint64_t sum_ns = 0;
  void observe(std::uint64_t ns);
};

struct MetricsInput {
  shm::StatsReply stats;        // clients counts every open session
  shm::ModelsReply models;      // per-model cached bytes and slots
  DurationHistogram decode;     // decode durations
  std::string version;          // build info
};

// The exposition text of `in`: every metric with its # HELP and # TYPE lines, label values escaped.
std::string metrics_text(const MetricsInput& in);

// Where metrics are served: "127.0.0.1:PORT" (PORT 0: a free port, chosen at bind) or an absolute Unix socket path.
// Other hosts are refused: the endpoint has no authentication, so it stays on loopback (put a proxy in front).
struct MetricsAddress {
  bool tcp = false;
  std::uint16_t port = 0;
  std::string path;
};
Result<MetricsAddress> parse_metrics_listen(const std::string& s);

// One thread answering HTTP GET /metrics (other paths 404, other methods 405) with the text last published. It
// serves up to kMaxConnections connections at once, each given kConnectionDeadlineMs for its whole request and
// response: silent or slow peers cannot hold a scrape behind them, and cannot hold more than kMaxConnections fds (a
// connection accepted beyond that closes the oldest one). Stopped and its socket closed (a Unix path removed) on
// destruction.
class MetricsServer {
 public:
  static constexpr int kConnectionDeadlineMs = 2000;
  static constexpr std::size_t kMaxConnections = 64;

  // A Unix path that holds a socket is probed with connect() first: a live listener there (epkd's own serving
  // socket, another daemon) is refused, never unlinked; only a stale socket file is replaced.
  static Result<std::unique_ptr<MetricsServer>> start(const MetricsAddress& addr);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  void publish(std::string text);
  // "127.0.0.1:43123" (the bound port) or the socket path.
  const std::string& where() const { return where_; }

 private:
  MetricsServer(shm::UniqueFd listen, shm::UniqueFd stop, std::string where, std::string unlink_path);
  struct Connection;
  void run();
  // Reads, answers or times out `c`; false once it is done with (answered, failed or past its deadline).
  bool step(Connection& c);
  std::string response(const std::string& request);

  shm::UniqueFd listen_;
  shm::UniqueFd stop_;  // an eventfd: written once by the destructor
  std::string where_;
  std::string unlink_path_;
  std::mutex mu_;
  std::shared_ptr<const std::string> text_;
  std::thread thread_;
};

// parse_metrics_listen, then MetricsServer::start: the server for a metrics_listen value, or what is wrong with it.
Result<std::unique_ptr<MetricsServer>> start_metrics_server(const std::string& metrics_listen);

}  // namespace epk::daemon
