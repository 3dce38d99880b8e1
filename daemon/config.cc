#include "daemon/config.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <toml++/toml.h>

#include <cstdlib>
#include <iostream>

namespace epk::daemon {
namespace {

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

Result<std::vector<ModelSpec>> read_model_array(const toml::table& t, const char* key, const char* value_key,
                                                const std::string& path) {
  std::vector<ModelSpec> out;
  const toml::node* n = t.get(key);
  if (n == nullptr) return out;
  const toml::array* arr = n->as_array();
  if (arr == nullptr) return make_error(ErrorCode::kBadInput, path + ": '" + key + "' must be an array of tables");
  for (const toml::node& e : *arr) {
    const toml::table* m = e.as_table();
    auto name = m != nullptr ? m->get_as<std::string>("name") : nullptr;
    auto value = m != nullptr ? m->get_as<std::string>(value_key) : nullptr;
    if (name == nullptr || value == nullptr) {
      return make_error(ErrorCode::kBadInput,
                        path + ": each [[" + key + "]] needs string fields 'name' and '" + value_key + "'");
    }
    out.push_back({name->get(), value->get()});
  }
  return out;
}

}  // namespace

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

Status load_config_file(const std::string& path, DaemonConfig* cfg) {
  toml::table t;
  try {
    t = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    return make_error(ErrorCode::kBadInput, path + ": " + std::string(e.description()));
  }
  if (auto v = t.get_as<std::string>("socket")) cfg->socket_path = v->get();
  if (auto v = t.get_as<std::string>("socket_mode")) {
    try {
      cfg->socket_mode = static_cast<std::uint32_t>(std::stoul(v->get(), nullptr, 8));
    } catch (...) {
      return make_error(ErrorCode::kBadInput, path + ": 'socket_mode' must be an octal string such as \"0660\"");
    }
  }
  auto get_int = [&](const char* key, std::int64_t lo, std::int64_t hi, auto setter) -> Status {
    const toml::node* n = t.get(key);
    if (n == nullptr) return {};
    auto v = n->value<std::int64_t>();
    if (!v || *v < lo || *v > hi) {
      return make_error(ErrorCode::kBadInput, path + ": '" + key + "' must be an integer in [" + std::to_string(lo) +
                                                  ", " + std::to_string(hi) + "]");
    }
    setter(*v);
    return {};
  };
  EPK_TRY(get_int("budget_mb", 1, std::int64_t{1} << 30,
                  [&](std::int64_t v) { cfg->budget_bytes = static_cast<std::uint64_t>(v) << 20; }));
  EPK_TRY(get_int("threads", 0, 1024, [&](std::int64_t v) { cfg->threads = static_cast<unsigned>(v); }));
  EPK_TRY(get_int("io_threads", 0, 64, [&](std::int64_t v) { cfg->io_threads = static_cast<unsigned>(v); }));
  EPK_TRY(get_int("read_timeout_ms", 1, 3600000, [&](std::int64_t v) { cfg->read_timeout_ms = static_cast<int>(v); }));
  EPK_TRY(get_int("spin_us", 0, 1000000, [&](std::int64_t v) { cfg->spin_us = v; }));
  EPK_TRY(get_int("synthetic_delay_us", 0, 60000000,
                  [&](std::int64_t v) { cfg->synthetic_delay_us = static_cast<std::uint32_t>(v); }));
  // Booleans strictly (as_boolean): value<bool>() would take an integer 1 or 0 as well.
  if (const toml::node* n = t.get("cpu")) {
    const toml::value<bool>* v = n->as_boolean();
    if (v == nullptr) return make_error(ErrorCode::kBadInput, path + ": 'cpu' must be true or false");
    cfg->serving = v->get() ? ServingMode::kHost : ServingMode::kAuto;
  }
  if (const toml::node* n = t.get("resident_compressed")) {
    const toml::value<bool>* v = n->as_boolean();
    if (v == nullptr) return make_error(ErrorCode::kBadInput, path + ": 'resident_compressed' must be true or false");
    cfg->resident_compressed = v->get();
  }
  if (auto v = t.get_as<std::string>("log_level")) cfg->log_level = v->get();
  EPK_TRY_ASSIGN(auto models, read_model_array(t, "model", "path", path));
  EPK_TRY_ASSIGN(auto synthetic, read_model_array(t, "synthetic", "spec", path));
  merge_models(&cfg->models, models);
  merge_models(&cfg->synthetic, synthetic);
  return {};
}

std::uint32_t spin_us_for(std::int64_t configured, unsigned cores) {
  if (configured >= 0) return static_cast<std::uint32_t>(std::min<std::int64_t>(configured, 1000000));
  return cores >= kAutoSpinMinCores ? kAutoSpinUs : 0;
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
  app.add_option("--config", config_file, "TOML config file (flags override it)");
  app.add_option("--socket", socket, "Unix socket path to listen on");
  app.add_option("--model", models, "NAME=FILE.epk (repeatable)");
  app.add_option("--synthetic", synthetic,
                 "TEST MODEL, not a checkpoint: NAME=[T:]RxC,... deterministic fp32 tensors (repeatable)");
  app.add_option("--budget-mb", budget_mb, "byte budget of the cache, in MiB")->check(CLI::Range(1, 1 << 30));
  app.add_option("--threads", threads, "CPU decode threads (0: one per core)")->check(CLI::Range(0, 1024));
  app.add_option("--io-threads", io_threads, "socket threads (0: a quarter of the cores, 1 to 4)")
      ->check(CLI::Range(0, 64));
  app.add_option("--read-timeout-ms", read_timeout_ms, "time allowed for a started message to arrive");
  app.add_option("--synthetic-delay-us", synthetic_delay_us, "added to every synthetic decode (tests)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error");
  std::int64_t spin_us = -1;
  app.add_option("--spin-us", spin_us,
                 "io threads poll for this many microseconds after their last request before blocking (config: "
                 "spin_us; default: 50 on 8 or more cores, else 0)")
      ->check(CLI::Range(0, 1000000));
  bool resident = false;
  app.add_flag("--resident-compressed", resident,
               "read every model's tensor sections into memory at open (io_uring), checksum them there and decode "
               "from memory; the file is then not read again (config: resident_compressed = true)");
  bool check_invariants = false;
  app.add_flag("--check-invariants", check_invariants, "verify the cache after every change; exit 3 if broken (tests)");
  app.add_flag("--cpu", cpu,
               "serve from host memfd pools with the CPU decoder even where a GPU exists (config: cpu = true); "
               "without it epkd serves from a device pool on CUDA device 0 where one is usable");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::cout << app.help();
    return std::optional<DaemonConfig>();
  } catch (const CLI::ParseError& e) {
    return make_error(ErrorCode::kInvalidArgument, std::string(e.what()));
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
  if (synthetic_delay_us != 0) cfg.synthetic_delay_us = synthetic_delay_us;
  if (!log_level.empty()) cfg.log_level = log_level;
  if (spin_us >= 0) cfg.spin_us = spin_us;
  if (cpu) cfg.serving = ServingMode::kHost;
  if (resident) cfg.resident_compressed = true;
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
  return std::optional<DaemonConfig>(std::move(cfg));
}

}  // namespace epk::daemon
