#include "daemon/config/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/support/scratch_dir.h"

namespace epk::daemon {
namespace {

// A config file in the temporary directory, removed when the test program exits (every test that writes one).
std::string write_temp(const std::string& name, const std::string& text) {
  auto path = std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()) + ".toml");
  std::ofstream(path) << text;
  epk::test::remove_at_exit(path);
  return path.string();
}

Result<std::optional<DaemonConfig>> parse(std::vector<std::string> args) {
  args.insert(args.begin(), "epkd");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return parse_command_line(static_cast<int>(argv.size()), argv.data());
}

TEST(Config, FlagsAlone) {
  auto c = parse({"--socket", "/tmp/s", "--budget-mb", "64", "--model", "a=x.epk", "--synthetic", "toy=4x4", "--cpu"});
  ASSERT_TRUE(c) << c.error().to_string();
  ASSERT_TRUE(c->has_value());
  const DaemonConfig& cfg = **c;
  EXPECT_EQ(cfg.socket_path, "/tmp/s");
  EXPECT_EQ(cfg.budget_bytes, 64u << 20);
  EXPECT_EQ(cfg.serving, ServingMode::kHost);
  ASSERT_EQ(cfg.models.size(), 1u);
  EXPECT_EQ(cfg.models[0].path, "x.epk");
  ASSERT_EQ(cfg.synthetic.size(), 1u);
  EXPECT_EQ(cfg.synthetic[0].path, "4x4");
}

TEST(Config, ServingModeIsAutoUnlessCpuIsAsked) {
  auto c = parse({"--socket", "/tmp/s", "--budget-mb", "64"});
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ((*c)->serving, ServingMode::kAuto);
  std::string host = write_temp("epkd_cfg_cpu", "socket = \"/tmp/s\"\nbudget_mb = 8\ncpu = true\n");
  c = parse({"--config", host});
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ((*c)->serving, ServingMode::kHost);
  std::string off = write_temp("epkd_cfg_nocpu", "socket = \"/tmp/s\"\nbudget_mb = 8\ncpu = false\n");
  c = parse({"--config", off});
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ((*c)->serving, ServingMode::kAuto);
  c = parse({"--config", off, "--cpu"});  // the flag overrides the file
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ((*c)->serving, ServingMode::kHost);
  std::string bad = write_temp("epkd_cfg_badcpu", "socket = \"/tmp/s\"\nbudget_mb = 8\ncpu = \"yes\"\n");
  c = parse({"--config", bad});
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("'cpu' must be true or false"), std::string::npos) << c.error().message;
  EXPECT_STREQ(serving_mode_name(ServingMode::kHost), "host");
  EXPECT_STREQ(serving_mode_name(ServingMode::kAuto), "auto");
}

// The on/off settings: each has a default, a command-line flag that sets the other value, a config file key, and
// refuses anything but a TOML boolean (a quoted string, or 1/0) with a message naming the key.
struct BoolSetting {
  const char* key;
  const char* flag;
  bool by_default;
  bool DaemonConfig::*field;
};

class ConfigBool : public testing::TestWithParam<BoolSetting> {};

TEST_P(ConfigBool, DefaultFlagFileAndBadValue) {
  const BoolSetting& b = GetParam();
  auto c = parse({"--socket", "/tmp/s", "--budget-mb", "64"});
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ((**c).*b.field, b.by_default);
  c = parse({"--socket", "/tmp/s", "--budget-mb", "64", b.flag});
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ((**c).*b.field, !b.by_default);
  const std::string head = "socket = \"/tmp/s\"\nbudget_mb = 8\n";
  std::string file = write_temp(std::string("epkd_cfg_") + b.key,
                                head + b.key + " = " + (b.by_default ? "false" : "true") + "\n");
  c = parse({"--config", file});
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ((**c).*b.field, !b.by_default);
  for (const char* bad : {"\"no\"", "1"}) {
    file = write_temp(std::string("epkd_cfg_bad_") + b.key, head + b.key + " = " + bad + "\n");
    c = parse({"--config", file});
    ASSERT_FALSE(c) << b.key << " = " << bad;
    EXPECT_NE(c.error().message.find(std::string("'") + b.key + "' must be true or false"), std::string::npos)
        << c.error().message;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Settings, ConfigBool,
    testing::Values(
        BoolSetting{"resident_compressed", "--resident-compressed", false, &DaemonConfig::resident_compressed}),
    [](const testing::TestParamInfo<BoolSetting>& i) { return std::string(i.param.key); });

// Flags epkd does not have (these were measurement switches) are refused by name, not ignored.
TEST(Config, RemovedFlagsAreRefused) {
  for (const char* flag : {"--no-early-reply", "--no-lane-locks", "--no-shared-hits"}) {
    auto c = parse({"--socket", "/tmp/s", "--budget-mb", "64", flag});
    ASSERT_FALSE(c) << flag;
    EXPECT_EQ(c.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(c.error().message.find(flag), std::string::npos) << c.error().message;
  }
}

TEST(Config, SpinFromFileThenFlag) {
  auto c = parse({"--socket", "/tmp/s", "--budget-mb", "64"});
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ((*c)->spin_us, DaemonConfig{}.spin_us);
  std::string path = write_temp("epkd_cfg_spin", "socket = \"/tmp/s\"\nbudget_mb = 8\nspin_us = 37\n");
  c = parse({"--config", path});
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ((*c)->spin_us, 37);
  c = parse({"--config", path, "--spin-us", "0"});  // 0 given on the command line still overrides the file
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ((*c)->spin_us, 0);
  EXPECT_FALSE(parse({"--socket", "/tmp/s", "--budget-mb", "64", "--spin-us", "1000001"}));
  std::string bad = write_temp("epkd_cfg_spinbad", "socket = \"/tmp/s\"\nbudget_mb = 8\nspin_us = -3\n");
  c = parse({"--config", bad});
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("spin_us"), std::string::npos) << c.error().message;
}

TEST(Config, AutomaticSpinOnlyWithCoresToSpare) {
  EXPECT_EQ(spin_us_for(-1, 2), 0u);
  EXPECT_EQ(spin_us_for(-1, kAutoSpinMinCores - 1), 0u);
  EXPECT_EQ(spin_us_for(-1, kAutoSpinMinCores), kAutoSpinUs);
  EXPECT_EQ(spin_us_for(-1, 128), kAutoSpinUs);
  EXPECT_EQ(spin_us_for(0, 128), 0u);  // given: as given, whatever the machine
  EXPECT_EQ(spin_us_for(17, 2), 17u);
}

TEST(Config, FileThenFlagsOverride) {
  std::string path = write_temp("epkd_cfg", R"(
socket = "/run/epkd.sock"
socket_mode = "0600"
budget_mb = 128
threads = 3
read_timeout_ms = 250
[[model]]
name = "a"
path = "/models/a.epk"
[[model]]
name = "b"
path = "/models/b.epk"
)");
  auto c = parse({"--config", path, "--budget-mb", "32", "--model", "b=/other/b.epk"});
  ASSERT_TRUE(c) << c.error().to_string();
  const DaemonConfig& cfg = **c;
  EXPECT_EQ(cfg.socket_path, "/run/epkd.sock");
  EXPECT_EQ(cfg.socket_mode, 0600u);
  EXPECT_EQ(cfg.budget_bytes, 32u << 20);
  EXPECT_EQ(cfg.threads, 3u);
  EXPECT_EQ(cfg.read_timeout_ms, 250);
  ASSERT_EQ(cfg.models.size(), 2u);
  EXPECT_EQ(cfg.models[1].path, "/other/b.epk");
  EXPECT_EQ(cfg.config_file, path);
  std::filesystem::remove(path);
}

TEST(Config, DevicesFromFlagAndFile) {
  auto none = parse({"--socket", "/tmp/s", "--budget-mb", "8"});
  ASSERT_TRUE(none && none->has_value());
  EXPECT_TRUE((*none)->devices.empty());  // every usable device
  auto flag = parse({"--socket", "/tmp/s", "--budget-mb", "8", "--devices", "1,0,3"});
  ASSERT_TRUE(flag) << flag.error().to_string();
  EXPECT_EQ((*flag)->devices, (std::vector<int>{1, 0, 3}));
  auto path = write_temp("cfg_devices", "socket = \"/tmp/s\"\nbudget_mb = 8\ndevices = [0, 1]\n"
                                         "device_budget_mb = { \"1\" = 32 }\n");
  auto file = parse({"--config", path});
  ASSERT_TRUE(file) << file.error().to_string();
  const DaemonConfig& cfg = **file;
  EXPECT_EQ(cfg.devices, (std::vector<int>{0, 1}));
  EXPECT_EQ(budget_for_device(cfg, 0), 8u << 20);
  EXPECT_EQ(budget_for_device(cfg, 1), 32u << 20);
  auto over = parse({"--config", path, "--devices", "2"});  // the flag overrides the file's list
  ASSERT_TRUE(over) << over.error().to_string();
  EXPECT_EQ((*over)->devices, (std::vector<int>{2}));
  std::filesystem::remove(path);
}

// tier_budget_mb: absent is no limit; 0 is allowed (every tier in host memory); the per-device table overrides it;
// the flag overrides both, for every device.
TEST(Config, TierBudgetFromFileAndFlag) {
  auto none = parse({"--socket", "/tmp/s", "--budget-mb", "8"});
  ASSERT_TRUE(none && none->has_value());
  EXPECT_EQ(tier_budget_for_device(**none, 0), kNoTierBudget);
  auto path = write_temp("cfg_tier_budget", "socket = \"/tmp/s\"\nbudget_mb = 8\ntier_budget_mb = 100\n"
                                            "device_tier_budget_mb = { \"1\" = 0, \"2\" = 7 }\n");
  auto file = parse({"--config", path});
  ASSERT_TRUE(file) << file.error().to_string();
  EXPECT_EQ(tier_budget_for_device(**file, 0), 100u << 20);
  EXPECT_EQ(tier_budget_for_device(**file, 1), 0u);
  EXPECT_EQ(tier_budget_for_device(**file, 2), 7u << 20);
  auto flag = parse({"--config", path, "--tier-budget-mb", "0"});
  ASSERT_TRUE(flag) << flag.error().to_string();
  EXPECT_EQ(tier_budget_for_device(**flag, 0), 0u);
  EXPECT_EQ(tier_budget_for_device(**flag, 2), 0u);
  EXPECT_FALSE(parse({"--socket", "/tmp/s", "--budget-mb", "8", "--tier-budget-mb", "-1"}));
  for (const char* bad : {"tier_budget_mb = -1\n", "tier_budget_mb = \"1\"\n", "device_tier_budget_mb = 4\n",
                          "device_tier_budget_mb = { \"0\" = -1 }\n"}) {
    auto p = write_temp("cfg_bad_tier_budget", std::string("socket = \"/tmp/s\"\nbudget_mb = 8\n") + bad);
    DaemonConfig cfg;
    Status st = load_config_file(p, &cfg);
    EXPECT_FALSE(st) << bad;
    if (!st) {
      EXPECT_NE(st.error().message.find("tier_budget_mb"), std::string::npos) << st.error().message;
    }
    std::filesystem::remove(p);
  }
  std::filesystem::remove(path);
}

// device_resident was replaced by tier_budget_mb: refused with its replacement named, never silently ignored.
TEST(Config, DeviceResidentNamesItsReplacement) {
  auto path = write_temp("cfg_device_resident", "socket = \"/tmp/s\"\nbudget_mb = 8\ndevice_resident = false\n");
  DaemonConfig cfg;
  Status st = load_config_file(path, &cfg);
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("tier_budget_mb"), std::string::npos) << st.error().message;
  EXPECT_FALSE(parse({"--socket", "/tmp/s", "--budget-mb", "8", "--no-device-resident"}));
  std::filesystem::remove(path);
}

TEST(Config, BadDeviceListsAreRefused) {
  for (const char* bad : {"0,", ",1", "a", "0,0", "64", "-1", "1;2", "0,,1", "9999"}) {
    auto c = parse({"--socket", "/tmp/s", "--budget-mb", "8", "--devices", bad});
    EXPECT_FALSE(c) << "'" << bad << "'";
  }
  for (const char* text : {"devices = 1\n", "devices = [\"0\"]\n", "devices = [0, 0]\n", "devices = [70]\n",
                           "devices = [0.5]\n", "device_budget_mb = 4\n", "device_budget_mb = { \"x\" = 4 }\n",
                           "device_budget_mb = { \"0\" = 0 }\n", "device_budget_mb = { \"0\" = \"4\" }\n"}) {
    auto path = write_temp("cfg_bad_devices", std::string("socket = \"/tmp/s\"\nbudget_mb = 8\n") + text);
    DaemonConfig cfg;
    Status st = load_config_file(path, &cfg);
    EXPECT_FALSE(st) << text;
    if (!st) {
      EXPECT_NE(st.error().message.find("device"), std::string::npos) << st.error().message;
    }
    std::filesystem::remove(path);
  }
}

TEST(Config, TheExampleFileParses) {
  DaemonConfig cfg;
  Status st = load_config_file(std::string(EPK_SOURCE_DIR) + "/daemon/config/epkd.example.toml", &cfg);
  ASSERT_TRUE(st) << st.error().to_string();
  EXPECT_EQ(cfg.budget_bytes, 8192ull << 20);
  EXPECT_EQ(cfg.socket_mode, 0660u);
  ASSERT_EQ(cfg.models.size(), 1u);
  ASSERT_EQ(cfg.synthetic.size(), 1u);
  EXPECT_EQ(cfg.synthetic[0].path, "embed:1000x64,layers.0.w:64x64");
}

TEST(Config, AccessRulesDomainsAndLimits) {
  std::string path = write_temp("epkd_trust",
                                "socket = \"/s\"\nbudget_mb = 4\nallowed_uids = [1000, \"root\"]\n"
                                "allowed_gids = [\"root\", 7]\nmax_sessions_per_uid = 3\nidle_timeout_ms = 250\n"
                                "space_wait_ms = 0\nmax_sessions = 300\nuid_pinned_percent = 25\n"
                                "max_slots_per_pool = 4096\n"
                                "[[domain]]\nname = \"batch\"\nuids = [4242]\nbudget_mb = 2\n"
                                "[[model]]\nname = \"m\"\npath = \"/m.epk\"\nuids = [4242]\ngids = [\"root\"]\n");
  auto c = parse({"--config", path});
  ASSERT_TRUE(c) << c.error().to_string();
  const DaemonConfig& cfg = **c;
  EXPECT_EQ(cfg.access.uids, (std::vector<std::uint32_t>{1000, 0}));
  EXPECT_EQ(cfg.access.gids, (std::vector<std::uint32_t>{0, 7}));
  EXPECT_EQ(cfg.max_sessions_per_uid, 3u);
  EXPECT_EQ(cfg.idle_timeout_ms, 250);
  EXPECT_EQ(cfg.space_wait_ms, 0);
  EXPECT_EQ(cfg.max_sessions, 300u);
  EXPECT_EQ(cfg.uid_pinned_percent, 25u);
  EXPECT_EQ(cfg.max_slots_per_pool, 4096u);
  ASSERT_EQ(cfg.domains.size(), 1u);
  EXPECT_EQ(cfg.domains[0].name, "batch");
  EXPECT_EQ(cfg.domains[0].members.uids, std::vector<std::uint32_t>{4242});
  EXPECT_EQ(cfg.domains[0].budget_bytes, 2u << 20);
  ASSERT_EQ(cfg.models.size(), 1u);
  EXPECT_EQ(cfg.models[0].access.uids, std::vector<std::uint32_t>{4242});
  EXPECT_EQ(cfg.models[0].access.gids, std::vector<std::uint32_t>{0});
  std::filesystem::remove(path);
  for (const char* bad : {"allowed_uids = [\"no-such-user-epk\"]\n", "allowed_gids = [-1]\n", "allowed_uids = 5\n",
                          "[[domain]]\nname = \"x\"\n", "[[domain]]\nuids = [1]\n",
                          "[[domain]]\nname = \"default\"\nuids = [1]\n", "uid_pinned_percent = 0\n",
                          "uid_pinned_percent = 101\n", "max_slots_per_pool = 0\n"}) {
    std::string p = write_temp("epkd_trust_bad", std::string("socket = \"/s\"\nbudget_mb = 4\n") + bad);
    auto r = parse({"--config", p});
    EXPECT_FALSE(r) << bad;
    std::filesystem::remove(p);
  }
  auto flags = parse({"--socket", "/s", "--budget-mb", "4", "--allow-uid", "5", "--allow-uid", "6", "--allow-gid",
                      "9", "--max-sessions-per-uid", "2", "--idle-timeout-ms", "10", "--space-wait-ms", "20"});
  ASSERT_TRUE(flags) << flags.error().to_string();
  EXPECT_EQ((*flags)->access.uids, (std::vector<std::uint32_t>{5, 6}));
  EXPECT_EQ((*flags)->access.gids, std::vector<std::uint32_t>{9});
  EXPECT_EQ((*flags)->max_sessions_per_uid, 2u);
  EXPECT_EQ((*flags)->idle_timeout_ms, 10);
  EXPECT_EQ((*flags)->space_wait_ms, 20);
}

TEST(Config, BadInputIsRefusedWithTheField) {
  std::string path = write_temp("epkd_bad", "budget_mb = -4\nsocket = \"/s\"\n");
  auto c = parse({"--config", path});
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("budget_mb"), std::string::npos);
  std::filesystem::remove(path);
  std::string broken = write_temp("epkd_broken", "socket = \n");
  EXPECT_FALSE(parse({"--config", broken}));
  std::filesystem::remove(broken);
  EXPECT_FALSE(parse({"--budget-mb", "4"}));  // no socket
  EXPECT_FALSE(parse({"--socket", "/s"}));    // no budget
  EXPECT_FALSE(parse({"--socket", "/s", "--budget-mb", "4", "--model", "noequals"}));
  EXPECT_FALSE(parse({"--socket", "/s", "--budget-mb", "4", "--bogus"}));
  EXPECT_FALSE(parse({"--config", "/nonexistent/epkd.toml"}));
}


// Refused keys and values: the message names the file, the line and the key, and the config is left untouched.
struct Refusal {
  const char* name;
  const char* text;      // the file; line 1 is "socket = ..."
  const char* expected;  // in the message, after "FILE:"
};

class ConfigRefuses : public testing::TestWithParam<Refusal> {};

TEST_P(ConfigRefuses, NamingTheKeyAndItsLine) {
  const Refusal& r = GetParam();
  std::string path = write_temp(std::string("epkd_refuse_") + r.name, r.text);
  DaemonConfig cfg;
  cfg.budget_bytes = 7;
  cfg.models.push_back({"kept", "kept.epk"});
  Status st = load_config_file(path, &cfg);
  ASSERT_FALSE(st) << r.text;
  EXPECT_NE(st.error().message.find(path + ":" + r.expected), std::string::npos) << st.error().message;
  EXPECT_EQ(st.error().code, ErrorCode::kBadInput);
  EXPECT_EQ(cfg.budget_bytes, 7u);  // nothing applied, not even the good keys before the bad one
  ASSERT_EQ(cfg.models.size(), 1u);
  EXPECT_EQ(cfg.models[0].name, "kept");
  // At start too: epkd --config FILE refuses it.
  auto c = parse({"--config", path});
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find(path + ":" + r.expected), std::string::npos) << c.error().message;
  std::filesystem::remove(path);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ConfigRefuses,
    testing::Values(
        Refusal{"typo", "socket = \"/s\"\nbudget_mb = 8\nbudgte_mb = 16\n",
                "3: unknown key 'budgte_mb' (did you mean 'budget_mb'?)"},
        Refusal{"far_typo", "socket = \"/s\"\nbudget_mb = 8\n\nwhatever = 1\n", "4: unknown key 'whatever'"},
        Refusal{"unknown_table", "socket = \"/s\"\nbudget_mb = 8\n[cache]\nsize = 3\n", "3: unknown key 'cache'"},
        Refusal{"model_key", "socket = \"/s\"\nbudget_mb = 8\n[[model]]\nname = \"a\"\npth = \"/a.epk\"\n",
                "5: unknown key 'pth' in [[model]] (did you mean 'path'?)"},
        Refusal{"model_missing", "socket = \"/s\"\nbudget_mb = 8\n[[model]]\nname = \"a\"\n",
                "3: '[[model]]' needs string fields 'name' (not empty) and 'path'"},
        Refusal{"synthetic_key", "socket = \"/s\"\nbudget_mb = 8\n[[synthetic]]\nname = \"t\"\nspec = \"4x4\"\n"
                "delay = 3\n", "6: unknown key 'delay' in [[synthetic]]"},
        Refusal{"model_twice", "socket = \"/s\"\n[[model]]\nname = \"a\"\npath = \"/a\"\n[[model]]\nname = \"a\"\n"
                "path = \"/b\"\n", "5: '[[model]]' name 'a' is listed twice (first at line 2)"},
        Refusal{"model_not_tables", "socket = \"/s\"\nmodel = [\"a\"]\n", "2: 'model' must be an array of tables"},
        Refusal{"int_as_string", "socket = \"/s\"\nbudget_mb = \"8\"\n", "2: 'budget_mb' must be an integer in [1, "},
        Refusal{"int_as_float", "socket = \"/s\"\nthreads = 2.0\n", "2: 'threads' must be an integer in [0, 1024]"},
        Refusal{"string_as_int", "socket = 5\n", "1: 'socket' must be a string"},
        Refusal{"bool_as_int", "socket = \"/s\"\n\ncpu = 1\n", "3: 'cpu' must be true or false"},
        Refusal{"mode_not_octal", "socket = \"/s\"\nsocket_mode = \"0698\"\n", "2: 'socket_mode' must be an octal"},
        Refusal{"mode_too_big", "socket = \"/s\"\nsocket_mode = \"7777\"\n", "2: 'socket_mode' must be an octal"},
        Refusal{"log_level", "socket = \"/s\"\nlog_level = \"verbose\"\n", "2: 'log_level' must be one of"},
        Refusal{"device_key", "socket = \"/s\"\ndevice_budget_mb = { \"x\" = 4 }\n",
                "2: 'device_budget_mb' key 'x' is not a device number"},
        Refusal{"metrics_host", "socket = \"/s\"\nmetrics_listen = \"0.0.0.0:9464\"\n",
                "2: 'metrics_listen' must be 127.0.0.1:PORT or an absolute socket path"},
        Refusal{"syntax", "socket = \"/s\"\nbudget_mb = \n", "2: "},
        // Keys epkd does not have (these were measurement switches): a file that sets one is refused, not ignored.
        Refusal{"early_reply", "socket = \"/s\"\nbudget_mb = 8\nearly_reply = false\n", "3: unknown key 'early_reply'"},
        Refusal{"lane_locks", "socket = \"/s\"\nbudget_mb = 8\nlane_locks = false\n", "3: unknown key 'lane_locks'"},
        Refusal{"shared_hits", "socket = \"/s\"\nbudget_mb = 8\nshared_hits = false\n",
                "3: unknown key 'shared_hits'"}),
    [](const testing::TestParamInfo<Refusal>& i) { return std::string(i.param.name); });

TEST(Config, MetricsListenFromFileThenFlag) {
  std::string path =
      write_temp("epkd_cfg_metrics", "socket = \"/s\"\nbudget_mb = 8\nmetrics_listen = \"127.0.0.1:9464\"\n");
  auto c = parse({"--config", path});
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ((*c)->metrics_listen, "127.0.0.1:9464");
  c = parse({"--config", path, "--metrics-listen", "/run/m.sock"});
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ((*c)->metrics_listen, "/run/m.sock");
  EXPECT_FALSE(parse({"--config", path, "--metrics-listen", "example.com:80"}));
  auto none = parse({"--socket", "/s", "--budget-mb", "4"});
  ASSERT_TRUE(none) << none.error().to_string();
  EXPECT_TRUE((*none)->metrics_listen.empty());  // off unless asked
  std::filesystem::remove(path);
}

TEST(Config, AnEmptyModelListIsNone) {
  std::string path = write_temp("epkd_cfg_nomodels", "socket = \"/s\"\nbudget_mb = 8\nmodel = []\nsynthetic = []\n");
  DaemonConfig cfg;
  Status st = load_config_file(path, &cfg);
  ASSERT_TRUE(st) << st.error().to_string();
  EXPECT_TRUE(cfg.models.empty());
  EXPECT_TRUE(cfg.synthetic.empty());
  std::filesystem::remove(path);
}

TEST(Config, EveryProblemIsReportedInFileOrder) {
  std::string path = write_temp("epkd_cfg_many", "zz_last = 1\nsocket = \"/s\"\naa_first = 2\nbudget_mb = 0\n");
  DaemonConfig cfg;
  Status st = load_config_file(path, &cfg);
  ASSERT_FALSE(st);
  const std::string& m = st.error().message;
  const auto a = m.find(path + ":1: unknown key 'zz_last'");
  const auto b = m.find(path + ":3: unknown key 'aa_first'");
  const auto c = m.find(path + ":4: 'budget_mb' must be an integer");
  ASSERT_NE(a, std::string::npos) << m;
  ASSERT_NE(b, std::string::npos) << m;
  ASSERT_NE(c, std::string::npos) << m;
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
  std::filesystem::remove(path);
}

TEST(Config, EveryKeyOfTheShippedFilesIsKnown) {
  // The example and the systemd config list (or comment) the keys; both must load as they are shipped.
  for (const char* f : {"/daemon/config/epkd.example.toml", "/systemd/epkd.toml"}) {
    DaemonConfig cfg;
    Status st = load_config_file(std::string(EPK_SOURCE_DIR) + f, &cfg);
    EXPECT_TRUE(st) << f << ": " << st.error().to_string();
    EXPECT_NE(cfg.budget_bytes, 0u) << f;
  }
}

TEST(Config, CheckConfigSummarisesAGoodFile) {
  std::string path = write_temp("epkd_cfg_check", "socket = \"/s\"\nbudget_mb = 8\n[[model]]\nname = \"a\"\n"
                                                  "path = \"/a.epk\"\n");
  auto r = check_config_file(path);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(*r, path + ": ok: 1 model(s), 0 synthetic, budget 8 MiB per pool, socket /s");
  std::string bad = write_temp("epkd_cfg_check_bad", "socket = \"/s\"\nbudgte_mb = 8\n");
  auto e = check_config_file(bad);
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message.find(bad + ":2: unknown key 'budgte_mb'"), std::string::npos) << e.error().message;
  // Flags may not ride along: --check-config validates the file alone.
  EXPECT_FALSE(parse({"--check-config", path, "--cpu"}));
  EXPECT_FALSE(parse({"--socket", "/s", "--budget-mb", "4", "--log-level", "loud"}));
  std::filesystem::remove(path);
  std::filesystem::remove(bad);
}

}  // namespace
}  // namespace epk::daemon
