// epkd's config file (daemon/config/config.h): the strict TOML reader, every key in one table (config_keys()).
#include <grp.h>
#include <pwd.h>
#include <toml++/toml.h>

#include <algorithm>
#include <functional>
#include <string_view>

#include "daemon/config/config.h"
#include "daemon/config/config_values.h"
#include "daemon/net/metrics.h"

namespace epk::daemon {
namespace {

// Where a value sits in the config file, for messages: "FILE:LINE: 'KEY' must be ...".
struct Where {
  const std::string& file;
  std::string key;  // as the message names it: "budget_mb", "[[model]] path"
  toml::source_position pos;
  std::string at() const { return file + ":" + std::to_string(pos.line) + ": "; }
  Error fail(const std::string& what) const { return make_error(ErrorCode::kBadInput, at() + "'" + key + "' " + what); }
};

// One key of the file: what it accepts, and where it goes in DaemonConfig. The value reaches `apply` with its
// position, so every refusal names the key and its line.
using ApplyKey = std::function<Status(const toml::node& value, const Where& where, DaemonConfig* cfg)>;
struct ConfigKey {
  std::string_view name;
  ApplyKey apply;
};

// Integers strictly (as_integer): 4.0 and "4" are refused, not converted.
ApplyKey integer(std::int64_t lo, std::int64_t hi, std::function<void(DaemonConfig*, std::int64_t)> set) {
  return [=](const toml::node& n, const Where& w, DaemonConfig* cfg) -> Status {
    const toml::value<std::int64_t>* v = n.as_integer();
    if (v == nullptr || v->get() < lo || v->get() > hi) {
      return w.fail("must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    set(cfg, v->get());
    return {};
  };
}

// Booleans strictly (as_boolean): value<bool>() would take an integer 1 or 0 as well.
ApplyKey boolean(std::function<void(DaemonConfig*, bool)> set) {
  return [=](const toml::node& n, const Where& w, DaemonConfig* cfg) -> Status {
    const toml::value<bool>* v = n.as_boolean();
    if (v == nullptr) return w.fail("must be true or false");
    set(cfg, v->get());
    return {};
  };
}

ApplyKey string(std::function<Status(DaemonConfig*, const std::string&, const Where&)> set) {
  return [=](const toml::node& n, const Where& w, DaemonConfig* cfg) -> Status {
    const toml::value<std::string>* v = n.as_string();
    if (v == nullptr) return w.fail("must be a string");
    return set(cfg, v->get(), w);
  };
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// "unknown key 'budgte_mb' (did you mean 'budget_mb'?)": the nearest known name within two edits, if any.
std::string unknown_key(std::string_view key, const std::vector<std::string_view>& known, const std::string& in) {
  std::string msg = "unknown key '" + std::string(key) + "'" + in;
  std::string_view best;
  std::size_t best_d = 3;
  for (std::string_view k : known) {
    const std::size_t d = edit_distance(key, k);
    if (d < best_d) {
      best_d = d;
      best = k;
    }
  }
  if (!best.empty()) msg += " (did you mean '" + std::string(best) + "'?)";
  return msg;
}

// A list of user or group ids, each a number or a name (resolved now, through the system's user database).
Result<std::vector<std::uint32_t>> id_list(const toml::node& n, const Where& w, bool groups) {
  const toml::array* arr = n.as_array();
  const char* what = groups ? "group" : "user";
  if (arr == nullptr) return w.fail(std::string("must be an array of ") + what + " ids or names");
  std::vector<std::uint32_t> out;
  for (const toml::node& e : *arr) {
    if (const toml::value<std::int64_t>* id = e.as_integer()) {
      if (id->get() < 0 || id->get() > 0xFFFFFFFEll) return w.fail(std::to_string(id->get()) + " is not an id");
      out.push_back(static_cast<std::uint32_t>(id->get()));
    } else if (const toml::value<std::string>* name = e.as_string()) {
      std::vector<char> buf(16384);
      if (groups) {
        group g{}, *found = nullptr;
        ::getgrnam_r(name->get().c_str(), &g, buf.data(), buf.size(), &found);
        if (found == nullptr) return w.fail("names no group '" + name->get() + "'");
        out.push_back(found->gr_gid);
      } else {
        passwd pw{}, *found = nullptr;
        ::getpwnam_r(name->get().c_str(), &pw, buf.data(), buf.size(), &found);
        if (found == nullptr) return w.fail("names no user '" + name->get() + "'");
        out.push_back(found->pw_uid);
      }
    } else {
      return w.fail("must hold ids (integers) or names (strings)");
    }
  }
  return out;
}

ApplyKey ids(bool groups, AccessRule DaemonConfig::*rule, std::vector<std::uint32_t> AccessRule::*field) {
  return [=](const toml::node& n, const Where& w, DaemonConfig* cfg) -> Status {
    EPK_TRY_ASSIGN((cfg->*rule).*field, id_list(n, w, groups));
    return {};
  };
}

// The optional `uids` / `gids` of a [[model]], [[synthetic]] or [[domain]] table.
Status read_access(const toml::table& m, const std::string& file, const std::string& table, AccessRule* rule) {
  for (auto [field, groups, into] : {std::tuple{"uids", false, &rule->uids}, std::tuple{"gids", true, &rule->gids}}) {
    if (const toml::node* v = m.get(field)) {
      EPK_TRY_ASSIGN(*into, id_list(*v, Where{file, "[[" + table + "]] " + field, v->source().begin}, groups));
    }
  }
  return {};
}

// [[domain]]: name (not "default"), uids and/or gids, optional budget_mb; names distinct.
Status parse_domains(const toml::node& n, const Where& w, DaemonConfig* cfg) {
  const toml::array* arr = n.as_array();
  if (arr == nullptr || (!arr->empty() && !arr->is_array_of_tables())) {
    return w.fail("must be an array of tables ([[domain]])");
  }
  const std::vector<std::string_view> fields = {"name", "uids", "gids", "budget_mb"};
  std::vector<DomainSpec> domains;
  for (const toml::node& e : *arr) {
    const toml::table& d = *e.as_table();
    const Where entry{w.file, "[[domain]]", d.source().begin};
    for (const auto& [k, v] : d) {
      if (std::find(fields.begin(), fields.end(), k.str()) == fields.end()) {
        return make_error(ErrorCode::kBadInput,
                          Where{w.file, "", k.source().begin}.at() + unknown_key(k.str(), fields, " in [[domain]]"));
      }
    }
    auto name = d.get_as<std::string>("name");
    if (name == nullptr || name->get().empty() || name->get() == "default") {
      return entry.fail("needs a string 'name' other than 'default'");
    }
    DomainSpec spec{name->get(), {}, 0};
    for (const DomainSpec& o : domains) {
      if (o.name == spec.name) return entry.fail("name '" + spec.name + "' is listed twice");
    }
    EPK_TRY(read_access(d, w.file, "domain", &spec.members));
    if (spec.members.open()) return entry.fail("'" + spec.name + "' lists no uids and no gids");
    if (const toml::node* b = d.get("budget_mb")) {
      const toml::value<std::int64_t>* mb = b->as_integer();
      if (mb == nullptr || mb->get() < 1 || mb->get() > (std::int64_t{1} << 30)) {
        return Where{w.file, "[[domain]] budget_mb", b->source().begin}.fail("must be an integer in [1, 2^30]");
      }
      spec.budget_bytes = static_cast<std::uint64_t>(mb->get()) << 20;
    }
    domains.push_back(std::move(spec));
  }
  cfg->domains = std::move(domains);
  return {};
}

// [[model]] / [[synthetic]]: an array of tables, each with the string fields `name` and `value_key` (and optional
// `uids` / `gids`: who may use the model), names distinct within the file; merged into `into` by name (a flag or an
// earlier entry of that name is replaced).
ApplyKey model_list(const char* table, const char* value_key, std::vector<ModelSpec> DaemonConfig::*into) {
  return [=](const toml::node& n, const Where& w, DaemonConfig* cfg) -> Status {
    const toml::array* arr = n.as_array();
    if (arr == nullptr || (!arr->empty() && !arr->is_array_of_tables())) {  // `model = []`: none
      return w.fail(std::string("must be an array of tables ([[") + table + "]])");
    }
    const std::vector<std::string_view> fields = {"name", value_key, "uids", "gids"};
    std::vector<ModelSpec> specs;
    std::vector<std::uint32_t> lines;
    for (const toml::node& e : *arr) {
      const toml::table& m = *e.as_table();
      const Where entry{w.file, std::string("[[") + table + "]]", m.source().begin};
      for (const auto& [k, v] : m) {
        if (std::find(fields.begin(), fields.end(), k.str()) == fields.end()) {
          return make_error(ErrorCode::kBadInput, Where{w.file, "", k.source().begin}.at() +
                                                      unknown_key(k.str(), fields, std::string(" in [[") + table + "]]"));
        }
      }
      auto name = m.get_as<std::string>("name");
      auto value = m.get_as<std::string>(value_key);
      if (name == nullptr || value == nullptr || name->get().empty()) {
        return entry.fail(std::string("needs string fields 'name' (not empty) and '") + value_key + "'");
      }
      for (std::size_t i = 0; i < specs.size(); ++i) {
        if (specs[i].name == name->get()) {
          return entry.fail("name '" + name->get() + "' is listed twice (first at line " + std::to_string(lines[i]) +
                            ")");
        }
      }
      ModelSpec spec{name->get(), value->get(), {}};
      EPK_TRY(read_access(m, w.file, table, &spec.access));
      specs.push_back(std::move(spec));
      lines.push_back(m.source().begin.line);
    }
    merge_models(&(cfg->*into), specs);
    return {};
  };
}

Status parse_socket_mode(DaemonConfig* cfg, const std::string& s, const Where& w) {
  if (s.empty() || s.size() > 4 || s.find_first_not_of("01234567") != std::string::npos) {
    return w.fail("must be an octal string such as \"0660\"");
  }
  const auto mode = static_cast<std::uint32_t>(std::stoul(s, nullptr, 8));
  if (mode > 0777) return w.fail("must be an octal string such as \"0660\" (at most \"0777\")");
  cfg->socket_mode = mode;
  return {};
}

Status parse_devices(const toml::node& n, const Where& w, DaemonConfig* cfg) {
  const toml::array* a = n.as_array();
  if (a == nullptr) return w.fail("must be an array of integers");
  std::vector<int> devices;
  for (const toml::node& e : *a) {
    if (!e.is_integer()) return w.fail("must be an array of integers");
    EPK_TRY(add_device(&devices, e.as_integer()->get(), w.at() + "'devices'"));
  }
  cfg->devices = std::move(devices);
  return {};
}

// { "1" = N, ... }: a number of MiB per device, N in [lo, 2^30], each device once.
ApplyKey device_table(std::int64_t lo, std::vector<std::pair<int, std::uint64_t>> DaemonConfig::*out) {
  return [=](const toml::node& n, const Where& w, DaemonConfig* cfg) -> Status {
    const toml::table* dt = n.as_table();
    if (dt == nullptr) return w.fail("must be a table such as { \"1\" = 512 }");
    std::vector<std::pair<int, std::uint64_t>> budgets;
    std::vector<int> seen;
    for (const auto& [key, value] : *dt) {
      std::string k(key.str());
      const Where at_key{w.file, w.key, key.source().begin};
      if (k.empty() || k.size() > 2 || k.find_first_not_of("0123456789") != std::string::npos) {
        return at_key.fail("key '" + k + "' is not a device number");
      }
      EPK_TRY(add_device(&seen, std::stoll(k), at_key.at() + "'" + w.key + "'"));
      const toml::value<std::int64_t>* mb = value.as_integer();
      if (mb == nullptr || mb->get() < lo || mb->get() > (std::int64_t{1} << 30)) {
        return at_key.fail("for device " + k + " must be an integer in [" + std::to_string(lo) + ", 2^30]");
      }
      budgets.emplace_back(seen.back(), static_cast<std::uint64_t>(mb->get()) << 20);
    }
    cfg->*out = std::move(budgets);
    return {};
  };
}

constexpr std::int64_t kMaxBudgetMb = std::int64_t{1} << 30;

// Every key epkd reads from its file, in one place (daemon/config/config.h documents them): a key not listed here is refused
// with its line, so a typo never silently leaves a default in force. Add a key by adding its line.
const std::vector<ConfigKey>& config_keys() {
  static const std::vector<ConfigKey> keys = {
      {"socket", string([](DaemonConfig* c, const std::string& v, const Where&) -> Status {
         c->socket_path = v;
         return {};
       })},
      {"socket_mode", string(parse_socket_mode)},
      {"budget_mb", integer(1, kMaxBudgetMb, [](DaemonConfig* c, std::int64_t v) {
         c->budget_bytes = static_cast<std::uint64_t>(v) << 20;
       })},
      {"devices", parse_devices},
      {"device_budget_mb", device_table(1, &DaemonConfig::device_budgets)},
      {"tier_budget_mb", integer(0, kMaxBudgetMb, [](DaemonConfig* c, std::int64_t v) {
         c->tier_budget_bytes = static_cast<std::uint64_t>(v) << 20;
       })},
      {"device_tier_budget_mb", device_table(0, &DaemonConfig::device_tier_budgets)},
      {"threads", integer(0, 1024, [](DaemonConfig* c, std::int64_t v) { c->threads = static_cast<unsigned>(v); })},
      {"io_threads",
       integer(0, 64, [](DaemonConfig* c, std::int64_t v) { c->io_threads = static_cast<unsigned>(v); })},
      {"read_timeout_ms",
       integer(1, 3600000, [](DaemonConfig* c, std::int64_t v) { c->read_timeout_ms = static_cast<int>(v); })},
      {"spin_us", integer(0, 1000000, [](DaemonConfig* c, std::int64_t v) { c->spin_us = v; })},
      {"synthetic_delay_us", integer(0, 60000000, [](DaemonConfig* c, std::int64_t v) {
         c->synthetic_delay_us = static_cast<std::uint32_t>(v);
       })},
      {"cpu", boolean([](DaemonConfig* c, bool v) { c->serving = v ? ServingMode::kHost : ServingMode::kAuto; })},
      {"resident_compressed", boolean([](DaemonConfig* c, bool v) { c->resident_compressed = v; })},
      {"device_resident", [](const toml::node&, const Where& w, DaemonConfig*) -> Status {
         return w.fail("was replaced by tier_budget_mb (0 keeps every model's compressed tier in host memory, "
                       "decoded on the GPU; absent: no limit)");
       }},
      {"log_level", string([](DaemonConfig* c, const std::string& v, const Where& w) -> Status {
         if (!is_log_level(v)) return w.fail(std::string("must be one of ") + kLogLevels);
         c->log_level = v;
         return {};
       })},
      {"metrics_listen", string([](DaemonConfig* c, const std::string& v, const Where& w) -> Status {
         if (auto a = parse_metrics_listen(v); !a) return w.fail("must be 127.0.0.1:PORT or an absolute socket path");
         c->metrics_listen = v;
         return {};
       })},
      {"metrics_restricted_models", boolean([](DaemonConfig* c, bool v) { c->metrics_restricted_models = v; })},
      {"idle_timeout_ms", integer(0, 2147483647, [](DaemonConfig* c, std::int64_t v) {
         c->idle_timeout_ms = static_cast<int>(v);
       })},
      {"space_wait_ms",
       integer(0, 3600000, [](DaemonConfig* c, std::int64_t v) { c->space_wait_ms = static_cast<int>(v); })},
      {"max_sessions_per_uid", integer(1, 1 << 20, [](DaemonConfig* c, std::int64_t v) {
         c->max_sessions_per_uid = static_cast<std::uint32_t>(v);
       })},
      {"max_sessions", integer(0, 1 << 24, [](DaemonConfig* c, std::int64_t v) {
         c->max_sessions = static_cast<std::uint32_t>(v);
       })},
      {"quota_pinned_mb", integer(0, kMaxBudgetMb, [](DaemonConfig* c, std::int64_t v) {
         c->quota_pinned_bytes = static_cast<std::uint64_t>(v) << 20;
       })},
      {"max_pins_per_tensor", integer(0, std::int64_t{1} << 31, [](DaemonConfig* c, std::int64_t v) {
         c->max_pins_per_tensor = static_cast<std::uint32_t>(v);
       })},
      {"uid_pinned_percent", integer(1, 100, [](DaemonConfig* c, std::int64_t v) {
         c->uid_pinned_percent = static_cast<std::uint32_t>(v);
       })},
      {"max_slots_per_pool", integer(16, std::int64_t{1} << 32, [](DaemonConfig* c, std::int64_t v) {
         c->max_slots_per_pool = static_cast<std::uint64_t>(v);
       })},
      {"allowed_uids", ids(false, &DaemonConfig::access, &AccessRule::uids)},
      {"allowed_gids", ids(true, &DaemonConfig::access, &AccessRule::gids)},
      {"client_decode_uids", ids(false, &DaemonConfig::client_decode, &AccessRule::uids)},
      {"client_decode_gids", ids(true, &DaemonConfig::client_decode, &AccessRule::gids)},
      {"domain", parse_domains},
      {"model", model_list("model", "path", &DaemonConfig::models)},
      {"synthetic", model_list("synthetic", "spec", &DaemonConfig::synthetic)},
  };
  return keys;
}

}  // namespace

Status load_config_file(const std::string& path, DaemonConfig* cfg) {
  toml::table t;
  try {
    t = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    return make_error(ErrorCode::kBadInput,
                      path + ":" + std::to_string(e.source().begin.line) + ": " + std::string(e.description()));
  }
  const std::vector<ConfigKey>& keys = config_keys();
  std::vector<std::string_view> names;
  for (const ConfigKey& k : keys) names.push_back(k.name);
  // Every problem is reported, in file order; nothing is applied unless the whole file is good.
  DaemonConfig next = *cfg;
  std::vector<std::pair<std::uint32_t, std::string>> problems;
  for (const auto& [key, value] : t) {
    const std::string_view name = key.str();  // clang before 16 cannot capture a structured binding
    auto k = std::find_if(keys.begin(), keys.end(), [&](const ConfigKey& c) { return c.name == name; });
    if (k == keys.end()) {
      problems.emplace_back(key.source().begin.line, Where{path, "", key.source().begin}.at() +
                                                         unknown_key(key.str(), names, ""));
      continue;
    }
    const Where w{path, std::string(key.str()), value.source().begin};
    if (Status st = k->apply(value, w, &next); !st) problems.emplace_back(w.pos.line, st.error().message);
  }
  if (!problems.empty()) {
    std::stable_sort(problems.begin(), problems.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::string msg;
    for (const auto& [line, text] : problems) msg += (msg.empty() ? "" : "\n") + text;
    return make_error(ErrorCode::kBadInput, msg);
  }
  *cfg = std::move(next);
  return {};
}

Result<std::string> check_config_file(const std::string& path) {
  DaemonConfig cfg;
  EPK_TRY(load_config_file(path, &cfg));
  if (Status st = check_listen_paths(cfg); !st) return make_error(st.error().code, path + ": " + st.error().message);
  std::string s = path + ": ok: " + std::to_string(cfg.models.size()) + " model(s), " +
                  std::to_string(cfg.synthetic.size()) + " synthetic";
  s += cfg.budget_bytes != 0 ? ", budget " + std::to_string(cfg.budget_bytes >> 20) + " MiB per pool"
                             : ", no budget_mb (pass --budget-mb)";
  s += cfg.socket_path.empty() ? ", no socket (pass --socket, or use socket activation)"
                               : ", socket " + cfg.socket_path;
  if (!cfg.metrics_listen.empty()) {
    s += ", metrics on " + cfg.metrics_listen +
         (cfg.metrics_restricted_models ? " (models with uids/gids listed)" : " (models with uids/gids left out)");
  }
  return s;
}

}  // namespace epk::daemon
