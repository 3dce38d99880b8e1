// epkd's command line, and the settings' helpers that the command line and the file (config_file.cc) share.
#include "daemon/config/config.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string_view>

#include "daemon/config/config_values.h"
#include "daemon/net/metrics.h"

namespace epk::daemon {

void merge_models(std::vector<ModelSpec>* into, const std::vector<ModelSpec>& from) {
  for (const ModelSpec& m : from) {
    bool replaced = false;
    for (ModelSpec& e : *into) {
      if (e.name == m.name) {
        e = m;
        replaced = true;
      }
    }
    if (!replaced) into->push_back(m);
  }
}

bool is_log_level(std::string_view s) {
  for (std::string_view l : {"trace", "debug", "info", "warn", "warning", "error", "err", "critical", "off"}) {
    if (s == l) return true;
  }
  return false;
}

const char* serving_mode_name(ServingMode m) {
  switch (m) {
    case ServingMode::kAuto: return "auto";
    case ServingMode::kHost: return "host";
  }
  return "unknown";
}

Result<ModelSpec> parse_name_value(const std::string& arg, const char* flag) {
  auto eq = arg.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size()) {
    return make_error(ErrorCode::kInvalidArgument, std::string(flag) + " '" + arg + "': expected NAME=VALUE");
  }
  return ModelSpec{arg.substr(0, eq), arg.substr(eq + 1)};
}

std::uint64_t budget_for_device(const DaemonConfig& cfg, int device) {
  for (const auto& [d, bytes] : cfg.device_budgets) {
    if (d == device) return bytes;
  }
  return cfg.budget_bytes;
}

std::uint64_t tier_budget_for_device(const DaemonConfig& cfg, int device) {
  for (const auto& [d, bytes] : cfg.device_tier_budgets) {
    if (d == device) return bytes;
  }
  return cfg.tier_budget_bytes;
}

Status add_device(std::vector<int>* out, std::int64_t d, const std::string& where) {
  if (d < 0 || d >= kMaxDeviceId) {
    return make_error(ErrorCode::kBadInput, where + ": device " + std::to_string(d) + " is not in [0, 64)");
  }
  if (std::find(out->begin(), out->end(), static_cast<int>(d)) != out->end()) {
    return make_error(ErrorCode::kBadInput, where + ": device " + std::to_string(d) + " listed twice");
  }
  out->push_back(static_cast<int>(d));
  return {};
}

Result<std::vector<int>> parse_device_list(const std::string& arg) {
  std::vector<int> out;
  std::size_t pos = 0;
  while (pos <= arg.size()) {
    std::size_t comma = std::min(arg.find(',', pos), arg.size());
    std::string item = arg.substr(pos, comma - pos);
    if (item.empty() || item.size() > 3 || item.find_first_not_of("0123456789") != std::string::npos) {
      return make_error(ErrorCode::kInvalidArgument, "--devices: '" + item + "' is not a device number");
    }
    EPK_TRY(add_device(&out, std::stoll(item), "--devices"));
    pos = comma + 1;
  }
  return out;
}

std::uint32_t spin_us_for(std::int64_t configured, unsigned cores) {
  if (configured >= 0) return static_cast<std::uint32_t>(std::min<std::int64_t>(configured, 1000000));
  return shm::auto_spin_us(cores);
}

Result<std::optional<DaemonConfig>> parse_command_line(int argc, char** argv) {
  CLI::App app{"epkd: serves decoded layers of .epk checkpoints to inference processes"};
  std::string config_file, socket, log_level;
  std::vector<std::string> models, synthetic;
  std::uint64_t budget_mb = 0;
  unsigned threads = 0, io_threads = 0;
  int read_timeout_ms = 0;
  std::uint32_t synthetic_delay_us = 0;
  bool cpu = false;
  std::string devices;
  app.add_option("--config", config_file, "TOML config file (flags override it)");
  std::string check_config;
  app.add_option("--check-config", check_config,
                 "validate a config file and exit (0: valid; 1: the problems, each with its line), serving nothing; "
                 "given alone");
  app.add_option("--devices", devices, "CUDA devices to serve, e.g. 0,1 (default: every usable one)");
  app.add_option("--socket", socket, "Unix socket path to listen on");
  app.add_option("--model", models, "NAME=FILE.epk (repeatable)");
  app.add_option("--synthetic", synthetic,
                 "TEST MODEL, not a checkpoint: NAME=[T:]RxC,... deterministic fp32 tensors (repeatable)");
  app.add_option("--budget-mb", budget_mb, "byte budget of the cache, in MiB")->check(CLI::Range(1, 1 << 30));
  app.add_option("--threads", threads, "CPU decode threads (0: one per core)")->check(CLI::Range(0, 1024));
  app.add_option("--io-threads", io_threads, "socket threads (0: half the cores, 1 to 16)")
      ->check(CLI::Range(0, 64));
  app.add_option("--read-timeout-ms", read_timeout_ms, "time allowed for a started message to arrive whole");
  int idle_timeout_ms = -1;
  app.add_option("--idle-timeout-ms", idle_timeout_ms,
                 "close a session after this long without a message, dropping its pins (0: never; config: "
                 "idle_timeout_ms)")
      ->check(CLI::Range(0, 2147483647));
  int space_wait_ms = -1;
  app.add_option("--space-wait-ms", space_wait_ms,
                 "how long an acquire that does not fit waits for slots still decoding or behind pending release "
                 "fences to come free (default 10000; 0: refuse at once; config: space_wait_ms)")
      ->check(CLI::Range(0, 3600000));
  std::int64_t quota_pinned_mb = -1;
  app.add_option("--quota-pinned-mb", quota_pinned_mb,
                 "MiB one client may hold pinned in a pool (0: up to the budget; config: quota_pinned_mb)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 30));
  std::int64_t uid_pinned_percent = -1;
  app.add_option("--uid-pinned-percent", uid_pinned_percent,
                 "percent of a pool's budget one uid may hold pinned over all its sessions (default 50, 100: no cap; "
                 "root and epkd's uid are never capped; config: uid_pinned_percent)")
      ->check(CLI::Range(1, 100));
  std::int64_t max_pins_per_tensor = -1;
  app.add_option("--max-pins-per-tensor", max_pins_per_tensor,
                 "pins one client may hold on one tensor (default 1024, 0: no limit; config: max_pins_per_tensor)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 31));
  std::uint32_t max_sessions_per_uid = 0;
  app.add_option("--max-sessions-per-uid", max_sessions_per_uid,
                 "open sessions one uid may hold (default 1024; config: max_sessions_per_uid)")
      ->check(CLI::Range(1, 1 << 20));
  std::vector<std::uint32_t> allow_uids, allow_gids;
  app.add_option("--allow-uid", allow_uids,
                 "a uid that may connect (repeatable; config: allowed_uids). None given: whoever the socket's mode "
                 "lets connect. epkd's own uid and root are always allowed");
  app.add_option("--allow-gid", allow_gids, "a gid whose members may connect (repeatable; config: allowed_gids)");
  app.add_option("--synthetic-delay-us", synthetic_delay_us, "added to every synthetic decode (tests)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error");
  std::string metrics_listen;
  app.add_option("--metrics-listen", metrics_listen,
                 "serve Prometheus metrics (HTTP GET /metrics) on 127.0.0.1:PORT or a Unix socket path (config: "
                 "metrics_listen)");
  std::int64_t spin_us = -1;
  app.add_option("--spin-us", spin_us,
                 "io threads poll for this many microseconds after their last request before blocking (config: "
                 "spin_us; default: 50 on 8 or more cores, else 0)")
      ->check(CLI::Range(0, 1000000));
  bool resident = false;
  app.add_flag("--resident-compressed", resident,
               "read every model's tensor sections into memory at open (io_uring), checksum them there and decode "
               "from memory; the file is then not read again (config: resident_compressed = true)");
  std::int64_t tier_budget_mb = -1;
  app.add_option("--tier-budget-mb", tier_budget_mb,
                 "device memory per device lane for models' compressed tiers, in MiB; a model whose tier does not "
                 "fit keeps it in host memory and copies each tensor's compressed bytes to the device to decode it "
                 "there; 0: every tier in host memory (config: tier_budget_mb; default: no limit)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 30));
  bool check_invariants = false;
  app.add_flag("--check-invariants", check_invariants, "verify the cache after every change; exit 3 if broken (tests)");
  app.add_flag("--cpu", cpu,
               "serve from host memfd pools with the CPU decoder even where a GPU exists (config: cpu = true); "
               "without it epkd serves a device pool on every usable CUDA device (or those of --devices)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::cout << app.help();
    return std::optional<DaemonConfig>();
  } catch (const CLI::ParseError& e) {
    return make_error(ErrorCode::kInvalidArgument, std::string(e.what()));
  }
  if (!check_config.empty()) {
    // main() runs `epkd --check-config FILE` itself (its own exit codes); reaching here means other options came too.
    return make_error(ErrorCode::kInvalidArgument, "--check-config FILE takes no other options");
  }
  if (!log_level.empty() && !is_log_level(log_level)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "--log-level '" + log_level + "': expected one of " + std::string(kLogLevels));
  }
  DaemonConfig cfg;
  if (!config_file.empty()) {
    EPK_TRY(load_config_file(config_file, &cfg));
    cfg.config_file = config_file;
  }
  if (!socket.empty()) cfg.socket_path = socket;
  if (budget_mb != 0) cfg.budget_bytes = budget_mb << 20;
  if (threads != 0) cfg.threads = threads;
  if (io_threads != 0) cfg.io_threads = io_threads;
  if (read_timeout_ms > 0) cfg.read_timeout_ms = read_timeout_ms;
  if (idle_timeout_ms >= 0) cfg.idle_timeout_ms = idle_timeout_ms;
  if (space_wait_ms >= 0) cfg.space_wait_ms = space_wait_ms;
  if (quota_pinned_mb >= 0) cfg.quota_pinned_bytes = static_cast<std::uint64_t>(quota_pinned_mb) << 20;
  if (max_pins_per_tensor >= 0) cfg.max_pins_per_tensor = static_cast<std::uint32_t>(max_pins_per_tensor);
  if (uid_pinned_percent >= 0) cfg.uid_pinned_percent = static_cast<std::uint32_t>(uid_pinned_percent);
  if (max_sessions_per_uid != 0) cfg.max_sessions_per_uid = max_sessions_per_uid;
  if (!allow_uids.empty()) cfg.access.uids = allow_uids;
  if (!allow_gids.empty()) cfg.access.gids = allow_gids;
  if (synthetic_delay_us != 0) cfg.synthetic_delay_us = synthetic_delay_us;
  if (!log_level.empty()) cfg.log_level = log_level;
  if (!metrics_listen.empty()) {
    EPK_TRY(parse_metrics_listen(metrics_listen));
    cfg.metrics_listen = metrics_listen;
  }
  if (spin_us >= 0) cfg.spin_us = spin_us;
  if (cpu) cfg.serving = ServingMode::kHost;
  if (!devices.empty()) {
    EPK_TRY_ASSIGN(cfg.devices, parse_device_list(devices));
  }
  if (resident) cfg.resident_compressed = true;
  if (tier_budget_mb >= 0) {
    cfg.tier_budget_bytes = static_cast<std::uint64_t>(tier_budget_mb) << 20;
    cfg.device_tier_budgets.clear();  // the flag is for every device
  }
  if (check_invariants) cfg.check_invariants = true;
  std::vector<ModelSpec> parsed;
  for (const std::string& m : models) {
    EPK_TRY_ASSIGN(ModelSpec s, parse_name_value(m, "--model"));
    parsed.push_back(std::move(s));
  }
  merge_models(&cfg.models, parsed);
  parsed.clear();
  for (const std::string& m : synthetic) {
    EPK_TRY_ASSIGN(ModelSpec s, parse_name_value(m, "--synthetic"));
    parsed.push_back(std::move(s));
  }
  merge_models(&cfg.synthetic, parsed);
  // Under socket activation systemd owns the socket (epkd.socket) and passes it in; the path is then optional.
  if (cfg.socket_path.empty() && std::getenv("LISTEN_FDS") == nullptr)
    return make_error(ErrorCode::kInvalidArgument, "no socket: pass --socket or set 'socket'");
  if (cfg.budget_bytes == 0)
    return make_error(ErrorCode::kInvalidArgument, "no budget: pass --budget-mb or 'budget_mb'");
  EPK_TRY(check_listen_paths(cfg));
  return std::optional<DaemonConfig>(std::move(cfg));
}

Status check_listen_paths(const DaemonConfig& cfg) {
  if (cfg.socket_path.empty() || cfg.metrics_listen.empty() || cfg.metrics_listen[0] != '/') return {};
  std::error_code ec;  // a relative socket path is taken from the working directory, as bind() takes it
  const std::filesystem::path socket = std::filesystem::absolute(cfg.socket_path, ec).lexically_normal();
  if (std::filesystem::path(cfg.metrics_listen).lexically_normal() == socket) {
    return make_error(ErrorCode::kInvalidArgument,
                      "metrics_listen '" + cfg.metrics_listen + "' is the serving socket's path ('" + cfg.socket_path +
                          "'): the metrics endpoint needs a path or port of its own");
  }
  return {};
}

}  // namespace epk::daemon
