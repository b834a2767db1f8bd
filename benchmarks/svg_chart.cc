#include "benchmarks/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace tpserve {
namespace {

constexpr double kWidth = 900, kHeight = 560;
constexpr double kLeft = 90, kRight = 220, kTop = 50, kBottom = 85;  // plot margins (legend right)
// A PanelChart's cell per panel, and the panel's plot margins inside its cell.
constexpr double kPanelWidth = 300, kPanelHeight = 420;
constexpr double kPanelLeft = 80, kPanelRight = 15, kPanelTop = 30, kPanelBottom = 85;
constexpr size_t kMaxPanelsPerRow = 4;
const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf"};

std::string Number(double v) {
  char text[32];
  const double a = std::fabs(v);
  if (a >= 1e9) std::snprintf(text, sizeof(text), "%gG", v / 1e9);
  else if (a >= 1e6) std::snprintf(text, sizeof(text), "%gM", v / 1e6);
  else if (a >= 1e3) std::snprintf(text, sizeof(text), "%gk", v / 1e3);
  else std::snprintf(text, sizeof(text), "%g", v);
  return text;
}

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  double Map(double v, double from, double to) const {
    const double a = log ? std::log10(lo) : lo, b = log ? std::log10(hi) : hi;
    const double x = log ? std::log10(std::max(v, lo)) : v;
    return from + (x - a) / (b - a) * (to - from);
  }
  std::vector<double> Ticks() const {
    std::vector<double> ticks;
    if (log) {
      for (double t = std::pow(10, std::floor(std::log10(lo))); t <= hi * 1.0001; t *= 10) {
        if (t >= lo * 0.9999) ticks.push_back(t);
      }
      return ticks;
    }
    const double raw = (hi - lo) / 6, magnitude = std::pow(10, std::floor(std::log10(raw)));
    const double step = raw / magnitude < 2 ? 2 * magnitude : raw / magnitude < 5 ? 5 * magnitude : 10 * magnitude;
    for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push_back(t);
    return ticks;
  }
};

Axis FitAxis(const std::vector<double>& values, bool log) {
  Axis axis;
  axis.log = log;
  std::vector<double> v;
  for (double x : values) {
    if (!log || x > 0) v.push_back(x);
  }
  if (v.empty()) return axis;
  const auto [mn, mx] = std::minmax_element(v.begin(), v.end());
  if (log) {
    axis.lo = std::pow(10, std::floor(std::log10(*mn)));
    axis.hi = std::pow(10, std::ceil(std::log10(*mx)));
    if (axis.hi <= axis.lo) axis.hi = axis.lo * 10;
  } else {
    axis.lo = std::min(0.0, *mn);
    axis.hi = *mx > axis.lo ? *mx * 1.08 : axis.lo + 1;
  }
  return axis;
}

// Where one plot's axes go, in SVG pixels.
struct PlotArea {
  double left, top, right, bottom;
};
constexpr PlotArea kChartArea = {kLeft, kTop, kWidth - kRight, kHeight - kBottom};

// The document, its background and its title, centred on `title_x`.
std::string Header(double width, double height, double title_x, const std::string& title) {
  char text[1024];
  std::snprintf(text, sizeof(text),
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" "
                "font-family=\"DejaVu Sans, sans-serif\" font-size=\"13\">\n"
                "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
                "<text x=\"%g\" y=\"28\" font-size=\"17\" text-anchor=\"middle\">%s</text>\n",
                width, height, title_x, Escape(title).c_str());
  return text;
}

// One plot's axis labels and its box.
std::string Axes(const PlotArea& a, const std::string& x_label, const std::string& y_label) {
  char text[1024];
  std::snprintf(
      text, sizeof(text),
      "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">%s</text>\n"
      "<text transform=\"translate(%g,%g) rotate(-90)\" text-anchor=\"middle\">%s</text>\n"
      "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"#333\"/>\n",
      (a.left + a.right) / 2, a.bottom + 63, Escape(x_label).c_str(), a.left - 68,
      (a.top + a.bottom) / 2, Escape(y_label).c_str(), a.left, a.top, a.right - a.left,
      a.bottom - a.top);
  return text;
}

// Legend entry `index` of a column whose top left is (x, top).
std::string LegendEntry(int index, const std::string& label, const std::string& color, bool dashed,
                        bool box, double x, double top) {
  char text[512];
  const double y = top + 10 + index * 22;
  if (box) {
    std::snprintf(text, sizeof(text), "<rect x=\"%g\" y=\"%g\" width=\"18\" height=\"12\" fill=\"%s\"/>", x, y - 6, color.c_str());
  } else {
    std::snprintf(text, sizeof(text), "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"%s\" stroke-width=\"2.5\"%s/>", x, y,
                  x + 24, y, color.c_str(), dashed ? " stroke-dasharray=\"6,4\"" : "");
  }
  std::string out = text;
  std::snprintf(text, sizeof(text), "<text x=\"%g\" y=\"%g\">%s</text>\n", x + 30, y + 4, Escape(label).c_str());
  return out + text;
}

std::string PartsLegend(const std::vector<std::string>& parts, double x, double top) {
  std::string svg;
  for (size_t p = 0; p < parts.size(); ++p) {
    svg += LegendEntry(static_cast<int>(p), parts[p], kColors[p % std::size(kColors)], false, true,
                       x, top);
  }
  return svg;
}

// Horizontal grid lines with their labels, for the y axis of either chart kind.
std::string YGrid(const Axis& ay, const PlotArea& a) {
  std::string svg;
  char text[512];
  for (double t : ay.Ticks()) {
    const double y = ay.Map(t, a.bottom, a.top);
    std::snprintf(text, sizeof(text),
                  "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"#ddd\"/><text x=\"%g\" "
                  "y=\"%g\" text-anchor=\"end\">%s</text>\n",
                  a.left, y, a.right, y, a.left - 6, y + 4, Number(t).c_str());
    svg += text;
  }
  return svg;
}

// The y grid, the bars and their category labels of `chart` in `a`, on a scale fitted to its own
// tallest bar.
std::string Bars(const StackedBarChart& chart, const PlotArea& a) {
  std::vector<double> totals;
  for (const auto& row : chart.values) {
    double t = 0;
    for (double v : row) t += v;
    totals.push_back(t);
  }
  const Axis ay = FitAxis(totals, false);
  const double x0 = a.left, x1 = a.right, y0 = a.bottom, y1 = a.top;
  std::string svg = YGrid(ay, a);
  char text[512];
  const double slot = (x1 - x0) / std::max<size_t>(1, chart.categories.size()), bar = slot * 0.6;
  for (size_t c = 0; c < chart.categories.size(); ++c) {
    const double x = x0 + slot * c + (slot - bar) / 2;
    double base = 0;
    for (size_t p = 0; p < chart.parts.size() && p < chart.values[c].size(); ++p) {
      const double top = base + chart.values[c][p];
      const double ya = ay.Map(base, y0, y1), yb = ay.Map(top, y0, y1);
      std::snprintf(text, sizeof(text),
                    "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n", x,
                    yb, bar, ya - yb, kColors[p % std::size(kColors)]);
      svg += text;
      base = top;
    }
    // One text line per '\n' of the category, under its bar.
    size_t begin = 0;
    for (int line = 0; begin <= chart.categories[c].size(); ++line) {
      size_t end = chart.categories[c].find('\n', begin);
      if (end == std::string::npos) end = chart.categories[c].size();
      std::snprintf(text, sizeof(text),
                    "<text x=\"%.1f\" y=\"%g\" text-anchor=\"middle\">%s</text>\n", x + bar / 2,
                    y0 + 18 + 15 * line,
                    Escape(chart.categories[c].substr(begin, end - begin)).c_str());
      svg += text;
      begin = end + 1;
    }
  }
  return svg;
}

}  // namespace

std::string RenderSvg(const LineChart& chart) {
  std::vector<double> xs, ys;
  for (const auto& s : chart.series) {
    for (const auto& [x, y] : s.points) {
      xs.push_back(x);
      ys.push_back(y);
    }
  }
  const Axis ax = FitAxis(xs, chart.log_x), ay = FitAxis(ys, chart.log_y);
  const double x0 = kChartArea.left, x1 = kChartArea.right, y0 = kChartArea.bottom,
               y1 = kChartArea.top;
  std::string svg = Header(kWidth, kHeight, (x0 + x1) / 2, chart.title) +
                    Axes(kChartArea, chart.x_label, chart.y_label);
  char text[512];
  for (double t : ax.Ticks()) {
    const double x = ax.Map(t, x0, x1);
    std::snprintf(text, sizeof(text), "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"#ddd\"/><text x=\"%g\" y=\"%g\" text-anchor=\"middle\">%s</text>\n",
                  x, y0, x, y1, x, y0 + 18, Number(t).c_str());
    svg += text;
  }
  svg += YGrid(ay, kChartArea);
  for (size_t i = 0; i < chart.series.size(); ++i) {
    const ChartSeries& s = chart.series[i];
    const std::string color = kColors[i % std::size(kColors)];
    std::string points;
    for (const auto& [x, y] : s.points) {
      if ((chart.log_x && x <= 0) || (chart.log_y && y <= 0)) continue;
      std::snprintf(text, sizeof(text), "%.1f,%.1f ", ax.Map(x, x0, x1), ay.Map(y, y0, y1));
      points += text;
    }
    svg += "<polyline fill=\"none\" stroke=\"" + color + "\" stroke-width=\"2.5\"" +
           (s.dashed ? " stroke-dasharray=\"6,4\"" : "") + " points=\"" + points + "\"/>\n";
    if (!s.dashed) {
      for (size_t k = 0; k < s.points.size(); ++k) {
        const auto [x, y] = s.points[k];
        if ((chart.log_x && x <= 0) || (chart.log_y && y <= 0)) continue;
        std::snprintf(text, sizeof(text), "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n", ax.Map(x, x0, x1),
                      ay.Map(y, y0, y1), color.c_str());
        svg += text;
        if (k < s.point_labels.size()) {
          std::snprintf(text, sizeof(text), "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"%s\">%s</text>\n",
                        ax.Map(x, x0, x1) + 6, ay.Map(y, y0, y1) - 6, color.c_str(), Escape(s.point_labels[k]).c_str());
          svg += text;
        }
      }
    }
    svg += LegendEntry(static_cast<int>(i), s.label, color, s.dashed, false, x1 + 15, y1);
  }
  return svg + "</svg>\n";
}

std::string RenderSvg(const StackedBarChart& chart) {
  const PlotArea& a = kChartArea;
  return Header(kWidth, kHeight, (a.left + a.right) / 2, chart.title) +
         Axes(a, chart.x_label, chart.y_label) + Bars(chart, a) +
         PartsLegend(chart.parts, a.right + 15, a.top) + "</svg>\n";
}

std::string RenderSvg(const PanelChart& chart) {
  const size_t n = chart.panels.size();
  const size_t rows = std::max<size_t>(1, (n + kMaxPanelsPerRow - 1) / kMaxPanelsPerRow);
  const size_t columns = std::max<size_t>(1, (n + rows - 1) / rows);  // rows as even as they go
  const double panels_width = columns * kPanelWidth;
  std::string svg =
      Header(panels_width + kRight, kTop + rows * kPanelHeight, panels_width / 2, chart.title);
  char text[512];
  for (size_t i = 0; i < n; ++i) {
    const double cell_x = (i % columns) * kPanelWidth, cell_y = kTop + (i / columns) * kPanelHeight;
    const PlotArea a = {cell_x + kPanelLeft, cell_y + kPanelTop, cell_x + kPanelWidth - kPanelRight,
                        cell_y + kPanelHeight - kPanelBottom};
    const StackedBarChart& panel = chart.panels[i];
    std::snprintf(text, sizeof(text),
                  "<text x=\"%g\" y=\"%g\" font-size=\"15\" text-anchor=\"middle\">%s</text>\n",
                  (a.left + a.right) / 2, a.top - 10, Escape(panel.title).c_str());
    svg += "<g>\n" + std::string(text) + Axes(a, panel.x_label, panel.y_label) + Bars(panel, a) +
           "</g>\n";
  }
  if (n > 0) svg += PartsLegend(chart.panels.front().parts, panels_width + 15, kTop + kPanelTop);
  return svg + "</svg>\n";
}

Status WriteChart(const std::string& path, const std::string& svg) {
  const bool png = path.size() > 4 && path.compare(path.size() - 4, 4, ".png") == 0;
  const std::string svg_path = png ? path + ".svg" : path;
  {
    std::ofstream out(svg_path);
    out << svg;
    if (!out) return FailedPrecondition(svg_path + ": cannot write");
  }
  if (!png) return Status::Ok();
  const std::string command = "rsvg-convert -f png -o '" + path + "' '" + svg_path + "' 2>&1";
  const int rc = std::system(command.c_str());
  std::remove(svg_path.c_str());
  if (rc != 0) {
    return FailedPrecondition(path + ": PNG needs rsvg-convert (apt-get install librsvg2-bin); use a .svg name instead");
  }
  return Status::Ok();
}

}  // namespace tpserve
