// epk top --socket S [-n N]: a live view of a running epkd, refreshed every second from its stats and models
// messages: one occupancy bar per pool, hit rate (in all and over the last second), acquires and decodes per second,
// the share of a second spent decoding, clients, and the models holding the most cached bytes. q (or Ctrl-C) quits.
// On a terminal (TERM set and not "dumb") it redraws one screen in the alternate buffer; otherwise (a pipe, a file,
// TERM=dumb) it prints each refresh as plain lines, blank-line separated, with no escape sequences.
//
// Not shown: decoded bytes per second and the largest cached tensors: the stats message carries neither (only
// counts, and cached bytes per model).
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include "client/client.h"
#include "tools/epk/cli_common.h"

namespace epk::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct TopArgs {
  std::string socket;
  unsigned iterations = 0;  // 0: until q
};

struct Sample {
  client::Stats stats;
  shm::ModelsReply models;
  Clock::time_point at;
};

volatile sig_atomic_t g_stop = 0;
volatile sig_atomic_t g_resized = 0;
extern "C" void on_stop_signal(int) { g_stop = 1; }
extern "C" void on_winch(int) { g_resized = 1; }

// The controlling terminal in the mode top needs, restored on every way out (destructor).
class Terminal {
 public:
  Terminal(bool screen, bool keys) : screen_(screen) {
    if (keys && ::tcgetattr(STDIN_FILENO, &saved_) == 0) {
      termios raw = saved_;
      raw.c_lflag &= static_cast<tcflag_t>(~(ICANON | ECHO));  // a key arrives without Enter, and is not echoed
      raw.c_cc[VMIN] = 0;
      raw.c_cc[VTIME] = 0;
      keys_ = ::tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
    }
    if (screen_) std::fputs("\x1b[?1049h\x1b[?25l", stdout);  // alternate screen, cursor hidden
  }
  ~Terminal() {
    if (screen_) std::fputs("\x1b[?25h\x1b[?1049l", stdout);
    std::fflush(stdout);
    if (keys_) ::tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }
  Terminal(const Terminal&) = delete;
  Terminal& operator=(const Terminal&) = delete;

 private:
  bool screen_;
  bool keys_ = false;
  termios saved_{};
};

int terminal_width() {
  winsize ws{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20) return ws.ws_col;
  return 100;
}

std::string percent(double num, double den) {
  if (den <= 0) return "-";
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * num / den);
  return buf;
}

std::string per_second(double count, double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f/s", seconds > 0 ? count / seconds : 0.0);
  return buf;
}

// [#####.....]: `width` cells, used/budget of them filled (rounded down, so a full bar means a full pool).
std::string bar(std::uint64_t used, std::uint64_t budget, int width) {
  int filled = 0;
  if (budget > 0) {
    filled = static_cast<int>(static_cast<double>(std::min(used, budget)) / static_cast<double>(budget) * width);
  }
  return "[" + std::string(static_cast<std::size_t>(filled), '#') +
         std::string(static_cast<std::size_t>(width - filled), '.') + "]";
}

std::string clock_text() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
  return buf;
}

// One screen. `prev` (the sample a refresh ago) gives the rates; the first screen has none.
std::vector<std::string> render(const TopArgs& args, const std::vector<shm::PoolInfo>& pools, const Sample& now,
                                const Sample* prev, int width, bool keys) {
  const client::Stats& s = now.stats;
  std::vector<std::string> out;
  char line[512];
  const std::uint64_t others = s.clients > 0 ? s.clients - 1 : 0;  // not counting this connection
  std::snprintf(line, sizeof line, "epk top: epkd at %s  %s%s", printable(args.socket).c_str(), clock_text().c_str(),
                keys ? "  (q quits)" : "");
  out.emplace_back(line);
  std::snprintf(line, sizeof line, "models %llu   clients %llu   hit rate %s of %llu acquires",
                static_cast<unsigned long long>(s.models), static_cast<unsigned long long>(others),
                percent(static_cast<double>(s.hits), static_cast<double>(s.hits + s.misses)).c_str(),
                static_cast<unsigned long long>(s.hits + s.misses));
  out.emplace_back(line);
  if (prev != nullptr) {
    const client::Stats& p = prev->stats;
    const double secs = std::chrono::duration<double>(now.at - prev->at).count();
    const auto hits = static_cast<double>(s.hits - p.hits), misses = static_cast<double>(s.misses - p.misses);
    const auto decodes = static_cast<double>(s.decodes - p.decodes);
    const double busy_ns = static_cast<double>(s.decode_ns - p.decode_ns);
    std::snprintf(line, sizeof line, "last %.1f s: acquires %s, hit rate %s, decodes %s, decoding %s of the time",
                  secs, per_second(hits + misses, secs).c_str(), percent(hits, hits + misses).c_str(),
                  per_second(decodes, secs).c_str(), percent(busy_ns, secs * 1e9).c_str());
  } else {
    std::snprintf(line, sizeof line, "last second: (rates from the next refresh)");
  }
  out.emplace_back(line);
  std::snprintf(line, sizeof line, "decodes %llu in all, %.3f ms each; prefetches %llu; evictions %llu",
                static_cast<unsigned long long>(s.decodes),
                s.decodes ? static_cast<double>(s.decode_ns) / 1e6 / static_cast<double>(s.decodes) : 0.0,
                static_cast<unsigned long long>(s.prefetches), static_cast<unsigned long long>(s.evictions));
  out.emplace_back(line);
  out.emplace_back("");
  // The rest of a pool line takes up to about 90 columns: the bar gets what is left of the width, 10 to 50 cells.
  const int bar_width = std::clamp(width - 90, 10, 50);
  for (const shm::PoolInfo& info : pools) {
    shm::PoolStats ps;
    for (const shm::PoolStats& x : s.pools) {
      if (x.pool_id == info.pool_id) ps = x;
    }
    std::string name = "pool " + std::to_string(info.pool_id) +
                       (info.device >= 0 ? " device " + std::to_string(info.device) : std::string(" host"));
    std::snprintf(line, sizeof line, "%-16s %s %6s  %s / %s  pinned %s  slots %llu", name.c_str(),
                  bar(ps.used_bytes, ps.budget_bytes, bar_width).c_str(),
                  percent(static_cast<double>(ps.used_bytes), static_cast<double>(ps.budget_bytes)).c_str(),
                  human_bytes(ps.used_bytes).c_str(), human_bytes(ps.budget_bytes).c_str(),
                  human_bytes(ps.pinned_bytes).c_str(), static_cast<unsigned long long>(ps.slots));
    out.emplace_back(line);
    if (ps.resident_bytes != 0) {
      out.emplace_back("                 resident compressed tier: " + human_bytes(ps.resident_bytes) +
                       " (outside the budget)");
    }
    if (ps.host_tier_bytes != 0) {
      // The copy traffic of decodes from the host tier: its rate over the last refresh where there is one.
      std::string rate;
      if (prev != nullptr) {
        for (const shm::PoolStats& x : prev->stats.pools) {
          if (x.pool_id != info.pool_id) continue;
          const double secs = std::chrono::duration<double>(now.at - prev->at).count();
          rate = ", " + human_bytes(static_cast<std::uint64_t>(
                            secs > 0 ? static_cast<double>(ps.staged_bytes - x.staged_bytes) / secs : 0.0)) +
                 "/s";
        }
      }
      out.emplace_back("                 host tier: " + human_bytes(ps.host_tier_bytes) + ", copied to the device " +
                       human_bytes(ps.staged_bytes) + rate);
    }
  }
  out.emplace_back("");
  // Models by cached bytes, largest first: what holds the cache.
  std::vector<const shm::ModelInfo*> models;
  for (const shm::ModelInfo& m : now.models.models) models.push_back(&m);
  std::stable_sort(models.begin(), models.end(),
                   [](const shm::ModelInfo* a, const shm::ModelInfo* b) { return a->cached_bytes > b->cached_bytes; });
  std::snprintf(line, sizeof line, "%-32s %8s %8s %12s %8s", "model", "tensors", "cached", "bytes", "pinned");
  out.emplace_back(line);
  for (const shm::ModelInfo* m : models) {
    std::snprintf(line, sizeof line, "%-32s %8u %8llu %12s %8llu", printable(m->name).c_str(), m->tensors,
                  static_cast<unsigned long long>(m->cached_slots), human_bytes(m->cached_bytes).c_str(),
                  static_cast<unsigned long long>(m->pinned_slots));
    out.emplace_back(line);
  }
  return out;
}

Result<Sample> take_sample(client::Client& c) {
  Sample smp;
  EPK_TRY_ASSIGN(smp.stats, c.stats());
  EPK_TRY_ASSIGN(smp.models, c.models());
  smp.at = Clock::now();
  return smp;
}

// Waits until the next refresh is due; true when q was pressed (or stdin asked to stop).
bool wait_for_key(Clock::time_point until, bool* watch_stdin) {
  while (!g_stop && !g_resized) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{STDIN_FILENO, POLLIN, 0};
    const int n = ::poll(&p, *watch_stdin ? 1 : 0, static_cast<int>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    char buf[64];
    const ssize_t got = ::read(STDIN_FILENO, buf, sizeof buf);
    if (got <= 0) {
      *watch_stdin = false;  // end of input (or /dev/null): refresh on the clock alone
      continue;
    }
    for (ssize_t i = 0; i < got; ++i) {
      if (buf[i] == 'q' || buf[i] == 'Q') return true;
    }
  }
  return false;
}

Status run_top(const TopArgs& args) {
  EPK_TRY_ASSIGN(client::Client c, client::Client::connect(args.socket, 10000));
  const char* term = std::getenv("TERM");
  const bool screen = ::isatty(STDOUT_FILENO) && term != nullptr && term[0] != '\0' && std::strcmp(term, "dumb") != 0;
  const bool keys = ::isatty(STDIN_FILENO) != 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  sa.sa_handler = on_winch;
  ::sigaction(SIGWINCH, &sa, nullptr);
  bool watch_stdin = true;
  std::optional<Sample> prev;
  Status result;
  {
    Terminal t(screen, keys);
    for (unsigned frame = 0; !g_stop; ++frame) {
      auto smp = take_sample(c);
      if (!smp) {
        result = make_error(smp.error().code, "epkd at " + args.socket + ": " + smp.error().message);
        break;
      }
      const std::vector<std::string> lines =
          render(args, c.pools(), *smp, prev ? &*prev : nullptr, screen ? terminal_width() : 100, keys);
      std::string text = screen ? "\x1b[H" : (frame > 0 ? "\n" : "");
      for (const std::string& l : lines) {
        text += screen ? l.substr(0, static_cast<std::size_t>(terminal_width())) + "\x1b[K\n" : l + "\n";
      }
      if (screen) text += "\x1b[J";
      std::fputs(text.c_str(), stdout);
      std::fflush(stdout);
      prev = std::move(*smp);
      if (args.iterations != 0 && frame + 1 >= args.iterations) break;
      g_resized = 0;
      if (wait_for_key(prev->at + std::chrono::seconds(1), &watch_stdin)) break;
    }
  }
  return result;
}

}  // namespace

void add_top_command(CLI::App& app, int* exit_code) {
  auto [cmd, args] = add_command(app, exit_code, "top",
                                 "Live view of a running epkd: pool occupancy, hit rate, decodes, clients", run_top);
  add_socket_option(*cmd, args->socket);
  cmd->add_option("-n,--iterations", args->iterations, "stop after N refreshes (default: until q)");
}

}  // namespace epk::cli
