#include "daemon/net/metrics.h"

#include <gtest/gtest.h>

#include <string>

namespace epk::daemon {
namespace {

TEST(Metrics, HistogramBoundsAgreeInBothUnits) {
  for (std::size_t i = 0; i < DurationHistogram::kBoundsNs.size(); ++i) {
    EXPECT_DOUBLE_EQ(static_cast<double>(DurationHistogram::kBoundsNs[i]) * 1e-9, DurationHistogram::kBoundsSeconds[i])
        << i;
  }
}

TEST(Metrics, HistogramBucketsHoldValuesUpToTheirBound) {
  DurationHistogram h;
  h.observe(0);              // <= 10 us
  h.observe(10'000);         // exactly 10 us: still the first bucket (le)
  h.observe(10'001);         // just above: the second
  h.observe(1'000'000'000);  // exactly 1 s: the last finite bucket
  h.observe(1'000'000'001);  // above 1 s: +Inf only
  EXPECT_EQ(h.counts[0], 2u);
  EXPECT_EQ(h.counts[1], 1u);
  EXPECT_EQ(h.counts[DurationHistogram::kBoundsSeconds.size() - 1], 1u);
  EXPECT_EQ(h.counts[DurationHistogram::kBoundsSeconds.size()], 1u);
  EXPECT_EQ(h.sum_ns, 2'000'020'002u);
}

TEST(Metrics, TextHasCumulativeBucketsEscapedLabelsAndUnits) {
  MetricsInput in;
  in.version = "0.1.0";
  in.stats.models = 1;
  in.stats.decodes = 3;
  shm::PoolStats p;
  p.pool_id = 1;
  p.device = 2;
  p.budget_bytes = 4096;
  p.hits = 5;
  in.stats.pools = {p};
  shm::ModelInfo m;
  m.name = "a\"b\\c\nd";
  m.cached_bytes = 77;
  in.models.models = {m};
  in.decode.observe(20'000);
  in.decode.observe(2'000'000'000);
  const std::string t = metrics_text(in);
  EXPECT_NE(t.find("# TYPE epkd_cache_hits_total counter\nepkd_cache_hits_total{pool=\"1\",device=\"2\"} 5\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("epkd_pool_budget_bytes{pool=\"1\",device=\"2\"} 4096\n"), std::string::npos) << t;
  EXPECT_NE(t.find("epkd_model_cached_bytes{model=\"a\\\"b\\\\c\\nd\"} 77\n"), std::string::npos) << t;
  EXPECT_NE(t.find("epkd_decode_duration_seconds_bucket{le=\"1e-05\"} 0\n"
                   "epkd_decode_duration_seconds_bucket{le=\"2.5e-05\"} 1\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("epkd_decode_duration_seconds_bucket{le=\"1\"} 1\n"
                   "epkd_decode_duration_seconds_bucket{le=\"+Inf\"} 2\n"
                   "epkd_decode_duration_seconds_sum 2.00002\n"
                   "epkd_decode_duration_seconds_count 2\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("epkd_build_info{version=\"0.1.0\"} 1\n"), std::string::npos) << t;
}

TEST(Metrics, ListenAddressIsLoopbackOrAPath) {
  auto a = parse_metrics_listen("127.0.0.1:9464");
  ASSERT_TRUE(a) << a.error().to_string();
  EXPECT_TRUE(a->tcp);
  EXPECT_EQ(a->port, 9464);
  a = parse_metrics_listen("/run/epkd/metrics.sock");
  ASSERT_TRUE(a);
  EXPECT_FALSE(a->tcp);
  EXPECT_EQ(a->path, "/run/epkd/metrics.sock");
  for (const char* bad : {"", "9464", "0.0.0.0:9464", "localhost:9464", "127.0.0.1:", "127.0.0.1:65536",
                          "127.0.0.1:80x", "relative.sock"}) {
    auto r = parse_metrics_listen(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message.find("metrics_listen"), std::string::npos);
  }
}

}  // namespace
}  // namespace epk::daemon
