#include "common/metrics/prometheus_text.h"

#include <cmath>

#include "gtest/gtest.h"

namespace floe {
namespace {

TEST(PrometheusTextTest, ParsesSamplesAndSumsByName) {
  const char* text =
      "# HELP floe_x_total X.\n"
      "# TYPE floe_x_total counter\n"
      "floe_x_total{proposer=\"ngram\"} 3\n"
      "floe_x_total{proposer=\"suffix\",note=\"a b\"} 4.5\n"
      "floe_x_total_other 100\n"
      "floe_y 1e3 1700000000000\n"
      "garbage\n";
  auto samples = ParsePrometheusText(text);
  EXPECT_EQ(samples.size(), 4u);
  EXPECT_DOUBLE_EQ(SumByName(samples, "floe_x_total"), 7.5);
  EXPECT_DOUBLE_EQ(SumByName(samples, "floe_y"), 1000.0);
  EXPECT_DOUBLE_EQ(SumByName(samples, "floe_missing"), 0.0);
}

TEST(PrometheusTextTest, SumsByWholeLabels) {
  const char* text =
      "floe_rpc_total{call=\"step\",reason=\"timeout\"} 2\n"
      "floe_rpc_total{call=\"step\",reason=\"unavailable\"} 3\n"
      "floe_rpc_total{call=\"start\",reason=\"timeout\"} 5\n"
      "floe_rpc_total{recall=\"step\"} 100\n"
      "floe_rpc_total_other{call=\"step\"} 1000\n"
      "floe_up 1\n";
  auto samples = ParsePrometheusText(text);
  EXPECT_DOUBLE_EQ(SumByLabels(samples, "floe_rpc_total", {"call=\"step\""}), 5.0);
  EXPECT_DOUBLE_EQ(SumByLabels(samples, "floe_rpc_total", {"reason=\"timeout\""}), 7.0);
  EXPECT_DOUBLE_EQ(SumByLabels(samples, "floe_rpc_total", {"call=\"step\"", "reason=\"timeout\""}), 2.0);
  EXPECT_DOUBLE_EQ(SumByLabels(samples, "floe_rpc_total", {}), 110.0);
  EXPECT_DOUBLE_EQ(SumByLabels(samples, "floe_up", {}), 1.0);
  // No match is NaN, not 0: a failed scrape must not pass for a zero counter.
  EXPECT_TRUE(std::isnan(SumByLabels(samples, "floe_rpc_total", {"call=\"end\""})));
  EXPECT_TRUE(std::isnan(SumByLabels(samples, "floe_missing", {})));
  EXPECT_TRUE(std::isnan(SumByLabels({}, "floe_up", {})));
}

}  // namespace
}  // namespace floe
