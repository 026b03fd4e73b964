#include "common/metrics/prometheus_text.h"

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

}  // namespace
}  // namespace floe
