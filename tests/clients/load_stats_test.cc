#include "clients/load_stats.h"

#include <gtest/gtest.h>

#include <cmath>

#include "clients/arrival_schedule.h"

namespace tpserve {
namespace {

// numpy.percentile([1..10], [50, 90, 99]) = 5.5, 9.1, 9.91 (linear interpolation).
TEST(LoadStats, PercentilesMatchNumpyOnAKnownSet) {
  std::vector<double> v = {7, 1, 10, 3, 5, 2, 9, 4, 8, 6};
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 5.5);
  EXPECT_NEAR(Percentile(v, 90), 9.1, 1e-12);
  EXPECT_NEAR(Percentile(v, 99), 9.91, 1e-12);
  EXPECT_DOUBLE_EQ(Percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(Percentile(v, 100), 10);
  EXPECT_DOUBLE_EQ(Percentile({42}, 90), 42);
  const Distribution d = Summarize(v);
  EXPECT_DOUBLE_EQ(d.mean, 5.5);
  EXPECT_EQ(d.count, 10u);
}

RequestRecord Record(double ttft, double e2e, int tokens) {
  RequestRecord r;
  r.ok = true;
  r.ttft_s = ttft;
  r.e2e_s = e2e;
  r.output_tokens = tokens;
  return r;
}

TEST(LoadStats, GoodputCountsOnlyRequestsMeetingEverySlo) {
  // TPOT = (e2e - ttft) / (tokens - 1): 10 ms, 30 ms, 10 ms.
  std::vector<RequestRecord> records = {Record(0.100, 0.190, 10), Record(0.100, 0.370, 10),
                                        Record(0.600, 0.690, 10)};
  RequestRecord failed;
  failed.error_code = "RESOURCE_EXHAUSTED";
  records.push_back(failed);
  const Slo slo{.ttft_ms = 500, .tpot_ms = 20};
  EXPECT_TRUE(MeetsSlo(records[0], slo));
  EXPECT_FALSE(MeetsSlo(records[1], slo));  // TPOT 30 ms
  EXPECT_FALSE(MeetsSlo(records[2], slo));  // TTFT 600 ms
  EXPECT_FALSE(MeetsSlo(records[3], slo));  // failed
  const LoadReport report = BuildReport(records, 2.0, slo);
  EXPECT_EQ(report.sent, 4u);
  EXPECT_EQ(report.completed + report.failed, report.sent);
  EXPECT_EQ(report.errors.at("RESOURCE_EXHAUSTED"), 1u);
  EXPECT_EQ(report.good, 1u);
  EXPECT_DOUBLE_EQ(report.goodput, 0.5);
  EXPECT_DOUBLE_EQ(report.request_throughput, 1.5);
  EXPECT_DOUBLE_EQ(report.output_token_throughput, 15.0);
  EXPECT_NEAR(report.tpot_ms.p50, 10.0, 1e-9);
  EXPECT_NEAR(report.ttft_ms.mean, 800.0 / 3, 1e-9);
  // No SLO: every completed request is good.
  EXPECT_EQ(BuildReport(records, 2.0, Slo{}).good, 3u);
}

TEST(ArrivalSchedule, SeededPoissonHasTheRequestedRate) {
  const auto a = ArrivalTimes(50.0, 20000, 7);
  EXPECT_EQ(a, ArrivalTimes(50.0, 20000, 7));  // reproducible
  EXPECT_NE(a, ArrivalTimes(50.0, 20000, 8));
  EXPECT_EQ(a.front(), 0.0);
  std::vector<double> gaps;
  for (size_t i = 1; i < a.size(); ++i) {
    ASSERT_GE(a[i], a[i - 1]);
    gaps.push_back(a[i] - a[i - 1]);
  }
  double mean = 0, sq = 0;
  for (double g : gaps) mean += g;
  mean /= gaps.size();
  for (double g : gaps) sq += (g - mean) * (g - mean);
  const double cv = std::sqrt(sq / gaps.size()) / mean;
  EXPECT_NEAR(mean, 1.0 / 50, 0.02 / 50);  // within 2%
  EXPECT_NEAR(cv, 1.0, 0.05);              // exponential: CV = 1
  // Gamma with shape 0.25: same mean rate, CV = 1 / sqrt(0.25) = 2.
  const auto bursty = ArrivalTimes(50.0, 20000, 7, 0.25);
  EXPECT_NEAR(bursty.back() / (bursty.size() - 1), 1.0 / 50, 0.05 / 50);
  double bmean = bursty.back() / (bursty.size() - 1), bsq = 0;
  for (size_t i = 1; i < bursty.size(); ++i) {
    const double g = bursty[i] - bursty[i - 1];
    bsq += (g - bmean) * (g - bmean);
  }
  EXPECT_NEAR(std::sqrt(bsq / (bursty.size() - 1)) / bmean, 2.0, 0.15);
}

}  // namespace
}  // namespace tpserve
