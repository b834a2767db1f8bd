// Chart writers: the series each tool plots come from its report, and the SVG draws them.
#include "benchmarks/svg_chart.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <regex>
#include <set>

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

// XML well-formedness, as far as the writers' output needs: one root element, tags closed in
// order, attribute values quoted, '<' only in tags and '&' only in entities.
::testing::AssertionResult WellFormedXml(const std::string& xml) {
  std::vector<std::string> open;
  int roots = 0;
  for (size_t at = 0; at < xml.size();) {
    if (xml[at] == '&') {
      const size_t semicolon = xml.find(';', at);
      const std::string entity =
          xml.substr(at, semicolon == std::string::npos ? 1 : semicolon + 1 - at);
      if (entity != "&lt;" && entity != "&gt;" && entity != "&amp;" && entity != "&quot;" &&
          entity != "&apos;") {
        return ::testing::AssertionFailure() << "bad entity at " << at;
      }
      at += entity.size();
      continue;
    }
    if (xml[at] != '<') {
      if (open.empty() && !std::isspace(static_cast<unsigned char>(xml[at]))) {
        return ::testing::AssertionFailure() << "text outside the root at " << at;
      }
      ++at;
      continue;
    }
    const bool closing = xml[++at] == '/';
    if (closing) ++at;
    const size_t name_end = xml.find_first_of(" \n/>", at);
    if (name_end == std::string::npos || name_end == at)
      return ::testing::AssertionFailure() << "no tag name at " << at;
    const std::string name = xml.substr(at, name_end - at);
    at = name_end;
    if (closing) {
      if (open.empty() || open.back() != name || xml[at] != '>') {
        return ::testing::AssertionFailure()
               << "</" << name << "> does not close the open element at " << at;
      }
      open.pop_back();
      ++at;
      continue;
    }
    while (at < xml.size() && xml[at] != '>' && xml.compare(at, 2, "/>") != 0) {
      if (std::isspace(static_cast<unsigned char>(xml[at]))) {
        ++at;
        continue;
      }
      const size_t equals = xml.find('=', at);
      if (equals == std::string::npos || xml[equals + 1] != '"') {
        return ::testing::AssertionFailure() << "unquoted attribute in <" << name << "> at " << at;
      }
      const size_t quote = xml.find('"', equals + 2);
      if (quote == std::string::npos || xml.find('<', equals) < quote) {
        return ::testing::AssertionFailure()
               << "unterminated attribute in <" << name << "> at " << at;
      }
      at = quote + 1;
    }
    if (at >= xml.size()) return ::testing::AssertionFailure() << "<" << name << "> never ends";
    if (open.empty()) ++roots;
    if (xml[at] == '>') {
      open.push_back(name);
      ++at;
    } else {
      at += 2;
    }
  }
  if (!open.empty())
    return ::testing::AssertionFailure() << "<" << open.back() << "> is never closed";
  if (roots != 1) return ::testing::AssertionFailure() << roots << " root elements";
  return ::testing::AssertionSuccess();
}

struct Rect {
  double x, y, width, height;
  std::string fill;
};

std::vector<Rect> Rects(const std::string& svg) {
  static const std::regex rect(
      R"re(<rect x="([0-9.]+)" y="([0-9.]+)" width="([0-9.]+)" height="([0-9.]+)" fill="([^"]*)")re");
  std::vector<Rect> out;
  for (std::sregex_iterator it(svg.begin(), svg.end(), rect), end; it != end; ++it) {
    out.push_back({std::stod((*it)[1]), std::stod((*it)[2]), std::stod((*it)[3]),
                   std::stod((*it)[4]), (*it)[5]});
  }
  return out;
}

// Each panel's SVG: what lies between <g> and </g>.
std::vector<std::string> Panels(const std::string& svg) {
  std::vector<std::string> out;
  for (size_t at = svg.find("<g>"); at != std::string::npos; at = svg.find("<g>", at + 1)) {
    out.push_back(svg.substr(at, svg.find("</g>", at) - at));
  }
  return out;
}

// One panel per entry of `totals`, each bar split into two equal parts.
PanelChart Panelled(const std::vector<std::vector<double>>& totals) {
  PanelChart chart{"many <panels>", {}};
  for (size_t i = 0; i < totals.size(); ++i) {
    StackedBarChart panel{"panel " + std::to_string(i), "tp", "ms", {}, {"compute", "comm"}, {}};
    for (size_t c = 0; c < totals[i].size(); ++c) {
      panel.categories.push_back(std::to_string(c + 1));
      panel.values.push_back({totals[i][c] / 2, totals[i][c] / 2});
    }
    chart.panels.push_back(panel);
  }
  return chart;
}

TEST(SvgChart, LineChartDrawsEverySeriesWithLabels) {
  LineChart chart{"t<1>", "size (bytes)", "time (us)", true, true,
                  {{"a", {{10, 1}, {100, 10}, {1000, 100}}}, {"b", {{10, 2}, {1000, 50}}, true}}};
  const std::string svg = RenderSvg(chart);
  EXPECT_TRUE(WellFormedXml(svg));
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

TEST(SvgChart, TheXmlCheckRejectsWhatItChecks) {
  EXPECT_TRUE(WellFormedXml("<svg a=\"1\"><g>x &amp; y</g><rect/></svg>\n"));
  EXPECT_FALSE(WellFormedXml("<svg><g></svg></g>"));
  EXPECT_FALSE(WellFormedXml("<svg><text>a & b</text></svg>"));
  EXPECT_FALSE(WellFormedXml("<svg x=1/>"));
  EXPECT_FALSE(WellFormedXml("<svg/><svg/>"));
  EXPECT_FALSE(WellFormedXml("<svg><g>"));
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
  EXPECT_TRUE(WellFormedXml(RenderSvg(chart)));
}

TEST(SvgChart, PanelsEachScaleToTheirOwnTallestBarUnderOneLegend) {
  const std::vector<std::vector<double>> totals = {{1, 0.5}, {1000, 10, 400}, {0.003}};
  const std::string svg = RenderSvg(Panelled(totals));
  EXPECT_TRUE(WellFormedXml(svg));
  EXPECT_EQ(Count(svg, "many &lt;panels&gt;"), 1u);
  const std::vector<std::string> panels = Panels(svg);
  ASSERT_EQ(panels.size(), totals.size());
  std::vector<double> tallest(panels.size());
  for (size_t i = 0; i < panels.size(); ++i) {
    SCOPED_TRACE("panel " + std::to_string(i));
    EXPECT_EQ(Count(panels[i], ">panel " + std::to_string(i) + "</text>"), 1u);
    EXPECT_EQ(Count(panels[i], ">tp</text>"), 1u);
    EXPECT_EQ(Count(panels[i], ">ms</text>"), 1u);
    Rect frame{};
    std::map<double, std::pair<double, double>> bars;  // x -> (top, bottom)
    for (const Rect& r : Rects(panels[i])) {
      if (r.fill == "none") {
        frame = r;
        continue;
      }
      auto [bar, added] = bars.try_emplace(r.x, r.y, r.y + r.height);
      if (!added)
        bar->second = {std::min(bar->second.first, r.y),
                       std::max(bar->second.second, r.y + r.height)};
    }
    ASSERT_GT(frame.height, 0);
    ASSERT_EQ(bars.size(), totals[i].size());
    std::vector<double> heights;
    for (const auto& [x, span] : bars) {
      EXPECT_NEAR(span.second, frame.y + frame.height, 0.2);  // stands on the axis
      heights.push_back(span.second - span.first);
    }
    // The panel's tallest bar nearly reaches its own plot's top, whatever the other panels hold,
    // and its other bars are to the same scale.
    tallest[i] = *std::max_element(heights.begin(), heights.end());
    EXPECT_GT(tallest[i], 0.9 * frame.height);
    EXPECT_LE(tallest[i], frame.height);
    const double largest = *std::max_element(totals[i].begin(), totals[i].end());
    for (size_t c = 0; c < heights.size(); ++c)
      EXPECT_NEAR(heights[c] / tallest[i], totals[i][c] / largest, 0.01);
  }
  EXPECT_NEAR(tallest[0], tallest[1], 0.2);
  EXPECT_NEAR(tallest[0], tallest[2], 0.2);
  // The legend: once, after the panels.
  const std::string after_panels = svg.substr(svg.rfind("</g>"));
  EXPECT_EQ(Count(svg, ">compute</text>"), 1u);
  EXPECT_EQ(Count(after_panels, ">compute</text>"), 1u);
  EXPECT_EQ(Count(after_panels, ">comm</text>"), 1u);
  EXPECT_EQ(Count(svg, "width=\"18\""), 2u);
}

TEST(SvgChart, PanelsGoSideBySideUpToFourThenIntoEvenRows) {
  const auto layout = [](size_t n) {
    std::set<double> xs, ys;
    for (const std::string& panel :
         Panels(RenderSvg(Panelled(std::vector<std::vector<double>>(n, {1, 2}))))) {
      for (const Rect& r : Rects(panel)) {
        if (r.fill == "none") {
          xs.insert(r.x);
          ys.insert(r.y);
        }
      }
    }
    return std::pair<size_t, size_t>{xs.size(), ys.size()};  // (columns, rows)
  };
  EXPECT_EQ(layout(1), (std::pair<size_t, size_t>{1, 1}));
  EXPECT_EQ(layout(4), (std::pair<size_t, size_t>{4, 1}));
  EXPECT_EQ(layout(6), (std::pair<size_t, size_t>{3, 2}));
  EXPECT_EQ(layout(9), (std::pair<size_t, size_t>{3, 3}));
  EXPECT_TRUE(WellFormedXml(RenderSvg(PanelChart{"none", {}})));
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
