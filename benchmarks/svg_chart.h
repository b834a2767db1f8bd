// Charts written as SVG by the tools themselves (no plotting dependency): line charts with
// linear or log axes, stacked bars, and panels of stacked bars each on its own scale. `.png` output
// goes through rsvg-convert (Debian's librsvg2-bin) when it is installed.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tpserve {

struct ChartSeries {
  std::string label;
  std::vector<std::pair<double, double>> points;  // (x, y)
  bool dashed = false;
  std::vector<std::string> point_labels;          // optional, one per point (e.g. "c=4")
};

struct LineChart {
  std::string title;
  std::string x_label;  // with units, e.g. "message size (bytes)"
  std::string y_label;
  bool log_x = false;
  bool log_y = false;
  std::vector<ChartSeries> series;
};

struct StackedBarChart {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<std::string> categories;       // one bar each
  std::vector<std::string> parts;            // stacked segments, bottom first
  std::vector<std::vector<double>> values;   // [category][part]
};

// Stacked-bar panels side by side (a grid when there are more than four), each with its own title,
// axis labels and y scale, under one title and one legend: the panels share `parts`, and the
// legend names the first panel's.
struct PanelChart {
  std::string title;
  std::vector<StackedBarChart> panels;
};

std::string RenderSvg(const LineChart& chart);
std::string RenderSvg(const StackedBarChart& chart);
std::string RenderSvg(const PanelChart& chart);

// Writes `svg` to `path`: as is for .svg, converted for .png.
Status WriteChart(const std::string& path, const std::string& svg);

}  // namespace tpserve
