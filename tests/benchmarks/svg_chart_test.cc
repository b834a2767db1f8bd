// Chart writers: the series each tool plots come from its report, and the SVG draws them.
#include "benchmarks/svg_chart.h"

#include <gtest/gtest.h>

#include <regex>

#include "benchmarks/comm_bench.h"
#include "benchmarks/decode_bench.h"
#include "clients/load_stats.h"

namespace tpserve {
namespace {

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(SvgChart, LineChartDrawsEverySeriesWithLabels) {
  LineChart chart{"t<1>", "size (bytes)", "time (us)", true, true,
                  {{"a", {{10, 1}, {100, 10}, {1000, 100}}}, {"b", {{10, 2}, {1000, 50}}, true}}};
  const std::string svg = RenderSvg(chart);
  EXPECT_EQ(Count(svg, "<polyline"), 2u);
  EXPECT_EQ(Count(svg, "<circle"), 3u);  // markers on the solid series only
  EXPECT_NE(svg.find("t&lt;1&gt;"), std::string::npos);
  EXPECT_NE(svg.find("size (bytes)"), std::string::npos);
  EXPECT_NE(svg.find("time (us)"), std::string::npos);
  EXPECT_NE(svg.find(">a</text>"), std::string::npos);
  EXPECT_NE(svg.find("stroke-dasharray"), std::string::npos);
  // Log axes: decade ticks 10 .. 1k on x.
  EXPECT_NE(svg.find(">1k</text>"), std::string::npos);
}

TEST(SvgChart, CommChartPlotsTheMeasuredPointsAndTheFit) {
  CommBenchReport report;
  report.collective = Collective::kAllReduce;
  report.ranks = 2;
  report.rows = {{.bytes = 1024, .oop_us = 2.0, .ip_us = 1.5}, {.bytes = 1 << 20, .oop_us = 200.0, .ip_us = 150.0}};
  report.fitted = true;
  report.fit = {.alpha_s = 1e-6, .beta_bytes_per_s = 5e9};
  const LineChart chart = CommLatencyChart(report);
  ASSERT_EQ(chart.series.size(), 3u);
  EXPECT_EQ(chart.series[0].points, (std::vector<std::pair<double, double>>{{1024, 2.0}, {1 << 20, 200.0}}));
  EXPECT_EQ(chart.series[1].points[1], (std::pair<double, double>{1 << 20, 150.0}));
  // model: α + S·f/β with f = 1 at 2 ranks: 1 µs + 1 MiB / 5 GB/s = 210.7 µs.
  EXPECT_NEAR(chart.series[2].points[1].second, 1.0 + 1048576 / 5e9 * 1e6, 1e-9);
  EXPECT_TRUE(chart.series[2].dashed);

  // With the MPI peer: its measured points, as a solid series before the model.
  report.peer = "mpi";
  report.peer_library = "Open MPI v4.1.4";
  report.rows[0].peer_us = 3.0;
  report.rows[1].peer_us = 250.0;
  const LineChart with_peer = CommLatencyChart(report);
  ASSERT_EQ(with_peer.series.size(), 4u);
  EXPECT_EQ(with_peer.series[2].label, "MPI_Allreduce");
  EXPECT_EQ(with_peer.series[2].points, (std::vector<std::pair<double, double>>{{1024, 3.0}, {1 << 20, 250.0}}));
  EXPECT_NE(with_peer.title.find("Open MPI v4.1.4"), std::string::npos);
}

TEST(SvgChart, DecodeChartStacksComputeCommHostPerPoint) {
  DecodeBenchReport report;
  report.rows = {{.tp = 1, .batch = 1, .compute_ms = 15, .comm_ms = 0, .host_ms = 0.1},
                 {.tp = 2, .batch = 8, .compute_ms = 35, .comm_ms = 4, .host_ms = 0.2}};
  const StackedBarChart chart = DecodeBreakdownChart(report);
  EXPECT_EQ(chart.categories, (std::vector<std::string>{"tp1 b1", "tp2 b8"}));
  EXPECT_EQ(chart.values[1], (std::vector<double>{35, 4, 0.2}));
  EXPECT_EQ(Count(RenderSvg(chart), "<rect x="), 2u * 3 + 3 + 1);  // bars, legend boxes, frame
}

TEST(SvgChart, DecodeChartNamesTheKernelOnASecondLineWhenKernelsDiffer) {
  DecodeBenchReport report;
  report.rows = {{.kernel = cpu::LinearKernel::kAmx, .tp = 1, .batch = 8, .compute_ms = 15},
                 {.kernel = cpu::LinearKernel::kAvx512, .tp = 1, .batch = 8, .compute_ms = 35}};
  const StackedBarChart chart = DecodeBreakdownChart(report);
  EXPECT_EQ(chart.categories, (std::vector<std::string>{"tp1 b8\namx", "tp1 b8\navx512"}));
  const std::string svg = RenderSvg(chart);
  EXPECT_EQ(Count(svg, ">amx</text>"), 1u);
  EXPECT_EQ(Count(svg, ">avx512</text>"), 1u);
  EXPECT_EQ(Count(svg, ">tp1 b8</text>"), 2u);
  EXPECT_NE(chart.x_label.find("Linear kernel"), std::string::npos);
}

TEST(SvgChart, LoadCurveHasOnePointPerRun) {
  LoadReport a, b;
  a.output_token_throughput = 50;
  a.ttft_ms.p50 = 100;
  a.tpot_ms.p50 = 15;
  a.e2e_ms.p50 = 600;
  b.output_token_throughput = 110;
  b.ttft_ms.p50 = 400;
  b.tpot_ms.p50 = 24;
  b.e2e_ms.p50 = 1100;
  const LineChart chart = LoadCurveChart({a, b}, {"c=1", "c=4"});
  ASSERT_EQ(chart.series.size(), 3u);
  EXPECT_EQ(chart.series[2].point_labels, (std::vector<std::string>{"c=1", "c=4"}));
  EXPECT_NE(RenderSvg(chart).find(">c=4</text>"), std::string::npos);
  EXPECT_EQ(chart.series[1].points, (std::vector<std::pair<double, double>>{{50, 15}, {110, 24}}));
  EXPECT_EQ(chart.series[0].label, "TTFT p50");
}

}  // namespace
}  // namespace tpserve
