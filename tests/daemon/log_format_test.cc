// epkd's log line format (daemon/log_format.h): field quoting, the journald priority of each level, and the "<N>"
// prefix epkd writes when its stderr is the journal (JOURNAL_STREAM set), on a real epkd.
#include "daemon/log_format.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <iterator>
#include <string>

#include "tests/daemon/epkd_harness.h"

namespace epk::daemon {
namespace {

TEST(LogFormat, FieldsAreQuotedOnlyWhenTheyMustBe) {
  EXPECT_EQ(kv("model.layers.0.mlp.up_proj.weight"), "model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(kv("/srv/models/llama.epk"), "/srv/models/llama.epk");
  EXPECT_EQ(kv(""), "\"\"");
  EXPECT_EQ(kv("two words"), "\"two words\"");
  EXPECT_EQ(kv("a=b"), "\"a=b\"");
  EXPECT_EQ(kv("say \"hi\" \\ now"), "\"say \\\"hi\\\" \\\\ now\"");
  EXPECT_EQ(kv("line\nnext\ttab\x01"), "\"line\\nnext\\ttab\\x01\"");
  PeerCredentials p;
  p.uid = 1000;
  p.gid = 100;
  p.pid = 4242;
  EXPECT_EQ(peer_kv(p), "uid=1000 gid=100 pid=4242");
}

TEST(LogFormat, LevelsMapToSyslogPriorities) {
  EXPECT_EQ(syslog_priority(spdlog::level::critical), 2);
  EXPECT_EQ(syslog_priority(spdlog::level::err), 3);
  EXPECT_EQ(syslog_priority(spdlog::level::warn), 4);
  EXPECT_EQ(syslog_priority(spdlog::level::info), 6);
  EXPECT_EQ(syslog_priority(spdlog::level::debug), 7);
  EXPECT_EQ(syslog_priority(spdlog::level::trace), 7);
}

TEST(LogFormat, UnderTheJournalEveryLineCarriesItsPriority) {
  ::setenv("JOURNAL_STREAM", "8:12345", 1);  // inherited by the epkd the harness starts
  std::string log;
  {
    test_harness::Epkd d({"--synthetic", "m=t0:8x8"});
    ::unsetenv("JOURNAL_STREAM");
    ASSERT_TRUE(d.running());
    EXPECT_EQ(d.terminate(), 0);
    log = test::read_file(d.log_path());
  }
  ASSERT_FALSE(log.empty());
  // The synthetic model's warning (4), then info lines (6), each with no timestamp: journald keeps its own.
  EXPECT_NE(log.find("<4>[epkd] model_synthetic model=m tensors=1"), std::string::npos) << log;
  EXPECT_NE(log.find("<6>[epkd] model_opened model=m id=0"), std::string::npos) << log;
  std::size_t lines = 0, at = 0;
  while (at < log.size()) {
    const std::size_t end = log.find('\n', at);
    EXPECT_EQ(log[at], '<') << log.substr(at, end - at);
    ++lines;
    at = end == std::string::npos ? log.size() : end + 1;
  }
  EXPECT_GE(lines, 3u);
}

}  // namespace
}  // namespace epk::daemon
