// epkd's settings: from a TOML file (--config) and from flags, flags overriding the file.
//
// TOML keys: socket = "PATH", socket_mode = "0660", budget_mb = N, threads = N (0: one per core, at least 1),
// io_threads = N, cpu = true|false (ServingMode), resident_compressed = true|false, tier_budget_mb = N,
// read_timeout_ms = N, idle_timeout_ms = N, max_sessions_per_uid = N, max_sessions = N, space_wait_ms = N,
// allowed_uids = [1000, "alice"], allowed_gids = ["epk"] (numbers or names), quota_pinned_mb = N,
// max_pins_per_tensor = N, uid_pinned_percent = N, max_slots_per_pool = N, client_decode_uids = [...], client_decode_gids = [...],
// devices = [0, 1] (the CUDA devices served; absent: every usable one), device_budget_mb = { "1" = N } (a device's
// own budget instead of budget_mb), device_tier_budget_mb = { "1" = N } (a device's own tier_budget_mb),
// synthetic_delay_us = N, log_level = "info", spin_us = N, metrics_listen = "127.0.0.1:9464" | "/run/epkd/metrics.sock",
// metrics_restricted_models = true|false,
// [[domain]] name = "..." uids = [...] gids = [...] [budget_mb = N],
// [[model]] name = "..." path = "FILE.epk" [uids = [...]] [gids = [...]], [[synthetic]] name = "..." spec = "...".
// Any other key is refused with its line (the keys are one table in config.cc, config_keys()).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "codec/common/result.h"
#include "daemon/net/peer_access.h"
#include "shm/spin.h"

namespace epk::daemon {

// Where epkd serves from, decided once at start; code that sets up pools and decoders branches on it.
enum class ServingMode : std::uint8_t {
  kAuto,  // a device pool and the GPU decoder per usable CUDA device (or per device in DaemonConfig::devices); a device
          // that fails setup is logged and skipped; none usable: host pools and the CPU decoder.
  kHost,  // `--cpu`, `cpu = true`: host memfd pools and the CPU decoder even where a GPU exists
};
const char* serving_mode_name(ServingMode m);  // "auto", "host"

struct ModelSpec {
  std::string name;
  std::string path;  // .epk file, or the synthetic spec for SyntheticSpec
  AccessRule access;  // who may open, list and acquire it (besides `DaemonConfig::access`); empty: every client
};

// A trust domain (docs/SECURITY.md): clients that may write each other's device slots. Each domain gets pools,
// caches and budgets of its own on every lane (and, on devices, its own resident tier): a client never receives the
// pool fd of another domain, and one domain's traffic never evicts another's slots. Clients listed by no domain are
// in the default domain (domain 0, budget_mb).
struct DomainSpec {
  std::string name;
  AccessRule members;  // uids and gids listed explicitly; a client belongs to the first domain that lists it
  std::uint64_t budget_bytes = 0;  // per pool; 0: the default budget
};

inline constexpr std::uint64_t kNoTierBudget = ~std::uint64_t{0};

struct DaemonConfig {
  std::string socket_path;
  std::uint32_t socket_mode = 0660;
  std::uint64_t budget_bytes = 0;  // per device pool (and the host pool)
  std::vector<int> devices;        // CUDA devices to serve; empty: every usable one
  std::vector<std::pair<int, std::uint64_t>> device_budgets;  // (device, bytes): overrides budget_bytes there
  unsigned threads = 0;        // CPU decode threads; 0: one per core
  unsigned io_threads = 0;     // socket threads, sessions spread over them; 0: half the cores, 1 to 16
  ServingMode serving = ServingMode::kAuto;
  // Read every model's tensor sections into epkd's memory at open (io_uring), checksum them there and decode from
  // memory (daemon/sources/resident_model.h); off: decode from the file's map.
  bool resident_compressed = false;
  // The device memory, per device lane (each trust domain's own), that models' compressed tiers may take beyond the
  // slot budget (tier_budget_mb; device_tier_budget_mb overrides it per device). Models are placed as they open: a
  // model whose tier fits what is left keeps it on the device (an uncached acquire is one kernel); any other gets a
  // host tier (shm/host_tier.h: one sealed memfd per model, shared read-only with clients that decode themselves) and
  // keeps on the device what is left of the budget, in forward order (daemon/lanes/tier_placement.h); a decode of a
  // tensor not kept there first copies its compressed bytes to the device. Every acquire of a lattice-rans tensor
  // still decodes on the GPU. 0: every tier in host memory. Default: no limit but the device's memory.
  std::uint64_t tier_budget_bytes = kNoTierBudget;
  std::vector<std::pair<int, std::uint64_t>> device_tier_budgets;  // (device, bytes): overrides tier_budget_bytes
  int read_timeout_ms = 5000;  // how long a started message (or the first hello) may take to arrive, whole
  // Who may connect (SO_PEERCRED at accept; daemon/net/peer_access.h). Empty: whoever the socket's mode lets connect.
  AccessRule access;
  // Who may decode in its own CUDA context from a model's compressed tier (open_stored), besides root and epkd's own
  // uid. Such a client gets the tier's device pool mapped writable (CUDA VMM has no read-only device mapping), so it
  // must be trusted with what every client of its domain decodes from (docs/SECURITY.md).
  AccessRule client_decode;
  std::vector<DomainSpec> domains;  // beyond the default one ([[domain]] tables)
  std::uint32_t max_sessions_per_uid = 1024;  // open sessions of one uid; more are refused at accept
  // Open sessions of all uids together, the last 32 only for root and epkd's own uid; more are refused at accept.
  // 0: from the fd limit (RLIMIT_NOFILE, raised to its hard limit at start, less 512 for models, pools and leases).
  std::uint32_t max_sessions = 0;
  // Per client and pool (daemon/cache/cache.h, ClientQuota): the bytes it may hold pinned (0: up to the budget) and the pins
  // it may hold on one tensor (0: no limit).
  std::uint64_t quota_pinned_bytes = 0;
  std::uint32_t max_pins_per_tensor = 1024;
  // Per uid and pool, over all its sessions: the percent of the budget it may hold pinned (100: no cap). Root and
  // epkd's own uid are never capped (docs/SECURITY.md, "Fair shares").
  std::uint32_t uid_pinned_percent = 50;
  // Slots one pool keeps at most (bounds the cache's metadata; the least recently used one makes room).
  std::uint64_t max_slots_per_pool = 65536;
  // An acquire that does not fit while unpinned bytes are held by slots still decoding (prefetches) or by released
  // slots whose fences are pending waits up to this long for them (0: refuse at once).
  int space_wait_ms = 10000;
  int idle_timeout_ms = 0;  // a session with no message for this long is closed (its pins go); 0: no limit
  // After its last handler ran, an io thread polls its io_context for this long before it blocks in epoll: a request
  // that arrives within it is picked up without the wake-up of a sleeping thread. Spins only right after activity,
  // so an idle daemon costs nothing. 0: block at once; negative: automatic (spin_us_for).
  std::int64_t spin_us = -1;
  std::uint32_t synthetic_delay_us = 0;
  std::string log_level = "info";
  bool check_invariants = false;  // verify the whole cache after every change (tests); exit 3 if one broke
  // Prometheus metrics endpoint (daemon/net/metrics.h): "127.0.0.1:PORT" or an absolute Unix socket path; empty: none.
  // Never the serving socket's path (check_listen_paths).
  std::string metrics_listen;
  // Whether the metrics list models that have uids/gids. Off: any local user can scrape the endpoint, so they are
  // left out (names, occupancy, and the epkd_models count); the pools' totals still include their slots.
  bool metrics_restricted_models = false;
  std::string config_file;        // empty when none; SIGHUP re-reads the models from it
  std::vector<ModelSpec> models;
  std::vector<ModelSpec> synthetic;  // TEST MODELS: path holds a SyntheticSource spec
};

// The io threads' poll window for a configured spin_us: as given when >= 0; automatic otherwise: kAutoSpinUs on a
// machine of at least kAutoSpinMinCores cores, else 0. On the 16-core H200 host 50 us cut the 1-client cache-hit
// latency and the 16-client tail; on a 2-core VM it made both worse (the polling thread takes the core the client
// needs): docs/measurements/cache-hit-round-trips.md.
using shm::kAutoSpinMinCores;
using shm::kAutoSpinUs;
std::uint32_t spin_us_for(std::int64_t configured, unsigned cores);

// The budget of device `device`'s pool: its override, else budget_bytes.
std::uint64_t budget_for_device(const DaemonConfig& cfg, int device);
// The device tier budget of `device`'s lanes: device_tier_budget_mb there, else tier_budget_mb (kNoTierBudget: none).
std::uint64_t tier_budget_for_device(const DaemonConfig& cfg, int device);

// Parses a device list "0,1" (--devices): distinct ids in [0, 64).
Result<std::vector<int>> parse_device_list(const std::string& arg);

// Reads a TOML config file into `cfg` (fields present in the file replace those in cfg). Strict: a key epkd does not
// know (top level, or inside a [[model]] / [[synthetic]] table), a value of the wrong type or out of range, and a
// model name listed twice are refused with "FILE:LINE: ..." naming the key; every problem is reported (one line each,
// in file order) and on any of them `cfg` is left as it was.
Status load_config_file(const std::string& path, DaemonConfig* cfg);

// What no single key can check: metrics_listen naming the serving socket's path (lexically normalised, "/run/./x" is
// "/run/x"; a relative socket path from the working directory), where the metrics server would replace the socket every client connects to. Run on the merged config
// (file and flags) at start and by --check-config.
Status check_listen_paths(const DaemonConfig& cfg);

// `epkd --check-config FILE`: load_config_file into a default config, serving nothing. The summary line printed on
// success ("FILE: ok: 2 model(s), ..."), or the problems.
Result<std::string> check_config_file(const std::string& path);

// Parses epkd's command line. nullopt when --help was printed (exit 0). Checks that a socket and a budget are set.
Result<std::optional<DaemonConfig>> parse_command_line(int argc, char** argv);

// Parses "NAME=VALUE" (--model, --synthetic).
Result<ModelSpec> parse_name_value(const std::string& arg, const char* flag);

}  // namespace epk::daemon
