#include "daemon/config.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <toml++/toml.h>

#include <grp.h>
#include <pwd.h>

#include <algorithm>
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

// A list of user or group ids, each a number or a name (resolved now, through the system's user database).
Result<std::vector<std::uint32_t>> read_id_list(const toml::table& t, const char* key, bool groups,
                                                const std::string& path) {
  std::vector<std::uint32_t> out;
  const toml::node* n = t.get(key);
  if (n == nullptr) return out;
  const toml::array* arr = n->as_array();
  auto bad = [&](const std::string& why) {
    return make_error(ErrorCode::kBadInput, path + ": '" + key + "': " + why);
  };
  if (arr == nullptr) return bad(std::string("must be an array of ") + (groups ? "group" : "user") + " ids or names");
  for (const toml::node& e : *arr) {
    if (auto id = e.as_integer()) {
      if (id->get() < 0 || id->get() > 0xFFFFFFFEll) return bad(std::to_string(id->get()) + " is not an id");
      out.push_back(static_cast<std::uint32_t>(id->get()));
    } else if (auto name = e.as_string()) {
      std::vector<char> buf(16384);
      if (groups) {
        group g{}, *found = nullptr;
        ::getgrnam_r(name->get().c_str(), &g, buf.data(), buf.size(), &found);
        if (found == nullptr) return bad("no group named '" + name->get() + "'");
        out.push_back(found->gr_gid);
      } else {
        passwd p{}, *found = nullptr;
        ::getpwnam_r(name->get().c_str(), &p, buf.data(), buf.size(), &found);
        if (found == nullptr) return bad("no user named '" + name->get() + "'");
        out.push_back(found->pw_uid);
      }
    } else {
      return bad("each entry must be an id (integer) or a name (string)");
    }
  }
  return out;
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
    ModelSpec spec{name->get(), value->get(), {}};
    const std::string where = path + ": [[" + key + "]] '" + spec.name + "'";
    EPK_TRY_ASSIGN(spec.access.uids, read_id_list(*m, "uids", false, where));
    EPK_TRY_ASSIGN(spec.access.gids, read_id_list(*m, "gids", true, where));
    out.push_back(std::move(spec));
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

std::uint64_t budget_for_device(const DaemonConfig& cfg, int device) {
  for (const auto& [d, bytes] : cfg.device_budgets) {
    if (d == device) return bytes;
  }
  return cfg.budget_bytes;
}

namespace {
constexpr int kMaxDeviceId = 64;

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
}  // namespace

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
  EPK_TRY(get_int("idle_timeout_ms", 0, (std::int64_t{1} << 31) - 1,
                  [&](std::int64_t v) { cfg->idle_timeout_ms = static_cast<int>(v); }));
  EPK_TRY(get_int("space_wait_ms", 0, 3600000, [&](std::int64_t v) { cfg->space_wait_ms = static_cast<int>(v); }));
  EPK_TRY(get_int("quota_pinned_mb", 0, std::int64_t{1} << 30,
                  [&](std::int64_t v) { cfg->quota_pinned_bytes = static_cast<std::uint64_t>(v) << 20; }));
  EPK_TRY(get_int("max_pins_per_tensor", 0, std::int64_t{1} << 31,
                  [&](std::int64_t v) { cfg->max_pins_per_tensor = static_cast<std::uint32_t>(v); }));
  EPK_TRY(get_int("max_sessions_per_uid", 1, 1 << 20,
                  [&](std::int64_t v) { cfg->max_sessions_per_uid = static_cast<std::uint32_t>(v); }));
  EPK_TRY_ASSIGN(cfg->access.uids, read_id_list(t, "allowed_uids", false, path));
  EPK_TRY_ASSIGN(cfg->access.gids, read_id_list(t, "allowed_gids", true, path));
  EPK_TRY(get_int("spin_us", 0, 1000000, [&](std::int64_t v) { cfg->spin_us = v; }));
  EPK_TRY(get_int("synthetic_delay_us", 0, 60000000,
                  [&](std::int64_t v) { cfg->synthetic_delay_us = static_cast<std::uint32_t>(v); }));
  // Booleans strictly (as_boolean): value<bool>() would take an integer 1 or 0 as well.
  auto get_bool = [&](const char* key, auto setter) -> Status {
    const toml::node* n = t.get(key);
    if (n == nullptr) return {};
    const toml::value<bool>* v = n->as_boolean();
    if (v == nullptr) return make_error(ErrorCode::kBadInput, path + ": '" + key + "' must be true or false");
    setter(v->get());
    return {};
  };
  EPK_TRY(get_bool("cpu", [&](bool v) { cfg->serving = v ? ServingMode::kHost : ServingMode::kAuto; }));
  EPK_TRY(get_bool("resident_compressed", [&](bool v) { cfg->resident_compressed = v; }));
  EPK_TRY(get_bool("device_resident", [&](bool v) { cfg->device_resident = v; }));
  EPK_TRY(get_bool("early_reply", [&](bool v) { cfg->early_reply = v; }));
  EPK_TRY(get_bool("shared_hits", [&](bool v) { cfg->shared_hits = v; }));
  EPK_TRY(get_bool("lane_locks", [&](bool v) { cfg->lane_locks = v; }));
  if (auto v = t.get_as<std::string>("log_level")) cfg->log_level = v->get();
  if (const toml::node* n = t.get("devices")) {
    const toml::array* a = n->as_array();
    if (a == nullptr) return make_error(ErrorCode::kBadInput, path + ": 'devices' must be an array of integers");
    std::vector<int> devices;
    for (const toml::node& e : *a) {
      auto d = e.value<std::int64_t>();
      if (!d || !e.is_integer()) {
        return make_error(ErrorCode::kBadInput, path + ": 'devices' must be an array of integers");
      }
      EPK_TRY(add_device(&devices, *d, path + ": 'devices'"));
    }
    cfg->devices = std::move(devices);
  }
  if (const toml::node* n = t.get("device_budget_mb")) {
    const toml::table* dt = n->as_table();
    if (dt == nullptr) {
      return make_error(ErrorCode::kBadInput, path + ": 'device_budget_mb' must be a table such as { \"1\" = 512 }");
    }
    std::vector<std::pair<int, std::uint64_t>> budgets;
    std::vector<int> seen;
    for (const auto& [key, value] : *dt) {
      std::string k(key.str());
      if (k.empty() || k.size() > 2 || k.find_first_not_of("0123456789") != std::string::npos) {
        return make_error(ErrorCode::kBadInput, path + ": 'device_budget_mb' key '" + k + "' is not a device number");
      }
      EPK_TRY(add_device(&seen, std::stoll(k), path + ": 'device_budget_mb'"));
      auto mb = value.value<std::int64_t>();
      if (!mb || !value.is_integer() || *mb < 1 || *mb > (std::int64_t{1} << 30)) {
        return make_error(ErrorCode::kBadInput,
                          path + ": 'device_budget_mb' for device " + k + " must be an integer in [1, 2^30]");
      }
      budgets.emplace_back(seen.back(), static_cast<std::uint64_t>(*mb) << 20);
    }
    cfg->device_budgets = std::move(budgets);
  }
  if (const toml::node* n = t.get("domain")) {
    const toml::array* arr = n->as_array();
    if (arr == nullptr) return make_error(ErrorCode::kBadInput, path + ": 'domain' must be an array of tables");
    std::vector<DomainSpec> domains;
    for (const toml::node& e : *arr) {
      const toml::table* d = e.as_table();
      auto name = d != nullptr ? d->get_as<std::string>("name") : nullptr;
      if (name == nullptr || name->get().empty() || name->get() == "default") {
        return make_error(ErrorCode::kBadInput, path + ": each [[domain]] needs a string 'name' other than 'default'");
      }
      DomainSpec spec{name->get(), {}, 0};
      const std::string where = path + ": [[domain]] '" + spec.name + "'";
      for (const DomainSpec& o : domains) {
        if (o.name == spec.name) return make_error(ErrorCode::kBadInput, where + " is listed twice");
      }
      EPK_TRY_ASSIGN(spec.members.uids, read_id_list(*d, "uids", false, where));
      EPK_TRY_ASSIGN(spec.members.gids, read_id_list(*d, "gids", true, where));
      if (spec.members.open()) return make_error(ErrorCode::kBadInput, where + ": lists no uids and no gids");
      if (const toml::node* b = d->get("budget_mb")) {
        auto mb = b->value<std::int64_t>();
        if (!mb || !b->is_integer() || *mb < 1 || *mb > (std::int64_t{1} << 30)) {
          return make_error(ErrorCode::kBadInput, where + ": 'budget_mb' must be an integer in [1, 2^30]");
        }
        spec.budget_bytes = static_cast<std::uint64_t>(*mb) << 20;
      }
      domains.push_back(std::move(spec));
    }
    cfg->domains = std::move(domains);
  }
  EPK_TRY_ASSIGN(auto models, read_model_array(t, "model", "path", path));
  EPK_TRY_ASSIGN(auto synthetic, read_model_array(t, "synthetic", "spec", path));
  merge_models(&cfg->models, models);
  merge_models(&cfg->synthetic, synthetic);
  return {};
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
  std::int64_t spin_us = -1;
  app.add_option("--spin-us", spin_us,
                 "io threads poll for this many microseconds after their last request before blocking (config: "
                 "spin_us; default: 50 on 8 or more cores, else 0)")
      ->check(CLI::Range(0, 1000000));
  bool resident = false;
  app.add_flag("--resident-compressed", resident,
               "read every model's tensor sections into memory at open (io_uring), checksum them there and decode "
               "from memory; the file is then not read again (config: resident_compressed = true)");
  bool no_device_resident = false;
  app.add_flag("--no-device-resident", no_device_resident,
               "keep no compressed tensors on the devices: uncached acquires of lattice-rans tensors decode on the CPU "
               "and are copied (config: device_resident = false)");
  bool no_early_reply = false;
  app.add_flag("--no-early-reply", no_early_reply,
               "answer an uncached device acquire only after its decode and tile status are done, with no status "
               "ticket (config: early_reply = false)");
  bool no_lane_locks = false;
  app.add_flag("--no-lane-locks", no_lane_locks,
               "cache hits and releases hold the service lock throughout, as before the lane locks (measurements; "
               "config: lane_locks = false)");
  bool no_shared_hits = false;
  app.add_flag("--no-shared-hits", no_shared_hits,
               "every cache hit and release takes its lane's lock exclusively (measurements; config: shared_hits = "
               "false)");
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
  if (max_sessions_per_uid != 0) cfg.max_sessions_per_uid = max_sessions_per_uid;
  if (!allow_uids.empty()) cfg.access.uids = allow_uids;
  if (!allow_gids.empty()) cfg.access.gids = allow_gids;
  if (synthetic_delay_us != 0) cfg.synthetic_delay_us = synthetic_delay_us;
  if (!log_level.empty()) cfg.log_level = log_level;
  if (spin_us >= 0) cfg.spin_us = spin_us;
  if (cpu) cfg.serving = ServingMode::kHost;
  if (!devices.empty()) {
    EPK_TRY_ASSIGN(cfg.devices, parse_device_list(devices));
  }
  if (resident) cfg.resident_compressed = true;
  if (no_device_resident) cfg.device_resident = false;
  if (no_early_reply) cfg.early_reply = false;
  if (check_invariants) cfg.check_invariants = true;
  if (no_lane_locks) cfg.lane_locks = false;
  if (no_shared_hits) cfg.shared_hits = false;
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
