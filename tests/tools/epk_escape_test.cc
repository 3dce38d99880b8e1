// Names a file or epkd controls reach the terminal escaped (tools/epk/cli_common.h, printable): an .epk whose tensor
// name carries an OSC title sequence and an erase-line sequence, through epk inspect and verify (text and JSON), and
// a model named the same way in epkd's config, through epk status and epk top. No raw ESC or BEL byte may come out.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "codec/container/writer.h"
#include "tests/daemon/epkd_harness.h"
#include "tests/support/scratch_dir.h"
#include "tests/tools/run_command.h"

namespace {

namespace fs = std::filesystem;
using epk::test::run_command;

const std::string kHostile = "evil\x1b]0;pwned\x07\x1b[2Kname";
const std::string kEscaped = "evil\\x1b]0;pwned\\x07\\x1b[2Kname";

// Whether `out` holds a byte a terminal acts on: ESC (starts every sequence) or BEL (ends an OSC one).
bool has_raw_control(const std::string& out) {
  return out.find('\x1b') != std::string::npos || out.find('\x07') != std::string::npos;
}

class EpkEscape : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = epk::test::test_scratch_dir("epk_escape"); }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(EpkEscape, InspectAndVerifyPrintHostileTensorNamesEscaped) {
  const std::string path = (dir_ / "hostile.epk").string();
  {
    auto w = epk::container::Writer::create(path, {{"source", "epk_escape_test"}});
    ASSERT_TRUE(w) << w.error().to_string();
    const std::vector<std::uint8_t> bytes(16, 0x3f);
    for (const std::string& name : {kHostile, std::string("plain")}) {
      epk::container::TensorSpec spec{name, {4}, epk::DType::kF32, epk::container::Encoding::kRaw, "{}"};
      ASSERT_TRUE(w->add_tensor(spec, {{"data", bytes}}));
    }
    ASSERT_TRUE(w->finish());
  }
  for (const std::string cmd : {"inspect", "verify"}) {
    auto r = run_command(std::string(EPK_TOOL) + " " + cmd + " " + path);
    EXPECT_EQ(r.status, 0) << cmd << ": " << r.out;
    EXPECT_FALSE(has_raw_control(r.out)) << cmd << " printed a raw control byte: " << r.out;
    EXPECT_NE(r.out.find(kEscaped), std::string::npos) << cmd << ": " << r.out;
    EXPECT_NE(r.out.find("plain"), std::string::npos) << cmd << ": " << r.out;
    r = run_command(std::string(EPK_TOOL) + " " + cmd + " --json " + path);
    EXPECT_EQ(r.status, 0) << cmd << " --json: " << r.out;
    EXPECT_FALSE(has_raw_control(r.out)) << cmd << " --json printed a raw control byte: " << r.out;
    EXPECT_NE(r.out.find("evil\\u001b]0;pwned\\u0007\\u001b[2Kname"), std::string::npos) << cmd << ": " << r.out;
  }
}

TEST_F(EpkEscape, StatusAndTopPrintHostileModelNamesEscaped) {
  // TOML's \u escapes let a config name a model with control characters; epkd serves it under that name.
  const std::string cfg = (dir_ / "epkd.toml").string();
  std::ofstream(cfg) << "[[synthetic]]\nname = \"evil\\u001b]0;pwned\\u0007\\u001b[2Kname\"\nspec = \"w:4x4\"\n";
  epk::test_harness::Epkd d({"--config", cfg});
  ASSERT_TRUE(d.running());
  {
    auto c = d.connect();
    ASSERT_TRUE(c) << c.error().to_string();
    auto m = c->models();
    ASSERT_TRUE(m) << m.error().to_string();
    ASSERT_EQ(m->models.size(), 1u);
    ASSERT_EQ(m->models[0].name, kHostile);  // the name as configured reaches the CLI raw
  }
  const std::string socket = " --socket " + d.socket();
  for (const std::string& cmd : {std::string("status"), std::string("status --json"), std::string("top -n 2")}) {
    auto r = run_command("TERM=dumb " + std::string(EPK_TOOL) + " " + cmd + socket + " </dev/null");
    EXPECT_EQ(r.status, 0) << cmd << ": " << r.out;
    EXPECT_FALSE(has_raw_control(r.out)) << cmd << " printed a raw control byte: " << r.out;
    const std::string want = cmd == "status --json" ? "evil\\u001b]0;pwned\\u0007\\u001b[2Kname" : kEscaped;
    EXPECT_NE(r.out.find(want), std::string::npos) << cmd << ": " << r.out;
  }
}

}  // namespace
