#include "clients/load_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace tpserve {

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = p / 100.0 * (values.size() - 1);
  const size_t low = static_cast<size_t>(std::floor(rank));
  const size_t high = std::min(values.size() - 1, low + 1);
  return values[low] + (rank - low) * (values[high] - values[low]);
}

Distribution Summarize(const std::vector<double>& values) {
  Distribution d;
  d.count = values.size();
  if (values.empty()) return d;
  d.mean = std::accumulate(values.begin(), values.end(), 0.0) / values.size();
  d.p50 = Percentile(values, 50);
  d.p90 = Percentile(values, 90);
  d.p99 = Percentile(values, 99);
  return d;
}

double TimePerOutputToken(const RequestRecord& r) {
  return r.output_tokens > 1 ? (r.e2e_s - r.ttft_s) / (r.output_tokens - 1) : 0;
}

bool MeetsSlo(const RequestRecord& r, const Slo& slo) {
  if (!r.ok) return false;
  if (slo.ttft_ms > 0 && r.ttft_s * 1e3 > slo.ttft_ms) return false;
  if (slo.tpot_ms > 0 && r.output_tokens > 1 && TimePerOutputToken(r) * 1e3 > slo.tpot_ms) return false;
  return true;
}

LoadReport BuildReport(const std::vector<RequestRecord>& records, double duration_s, const Slo& slo) {
  LoadReport report;
  report.duration_s = duration_s;
  report.sent = records.size();
  std::vector<double> ttft, tpot, itl, e2e;
  for (const RequestRecord& r : records) {
    if (!r.ok) {
      ++report.failed;
      ++report.errors[r.error_code];
      continue;
    }
    ++report.completed;
    report.output_tokens += r.output_tokens;
    if (r.output_tokens > 0) ttft.push_back(r.ttft_s * 1e3);
    if (r.output_tokens > 1) tpot.push_back(TimePerOutputToken(r) * 1e3);
    for (double gap : r.itl_s) itl.push_back(gap * 1e3);
    e2e.push_back(r.e2e_s * 1e3);
    if (MeetsSlo(r, slo)) ++report.good;
  }
  if (duration_s > 0) {
    report.request_throughput = report.completed / duration_s;
    report.output_token_throughput = report.output_tokens / duration_s;
    report.goodput = report.good / duration_s;
  }
  report.ttft_ms = Summarize(ttft);
  report.tpot_ms = Summarize(tpot);
  report.itl_ms = Summarize(itl);
  report.e2e_ms = Summarize(e2e);
  return report;
}

}  // namespace tpserve

namespace tpserve {

LineChart LoadCurveChart(const std::vector<LoadReport>& runs, const std::vector<std::string>& labels) {
  LineChart chart;
  chart.title = "throughput vs latency (one point per load level)";
  chart.x_label = "output throughput (tokens/s)";
  chart.y_label = "latency, median (ms)";
  chart.log_y = true;
  ChartSeries ttft{"TTFT p50", {}}, tpot{"TPOT p50", {}}, e2e{"E2E p50", {}};
  for (const LoadReport& r : runs) {
    ttft.points.emplace_back(r.output_token_throughput, r.ttft_ms.p50);
    tpot.points.emplace_back(r.output_token_throughput, r.tpot_ms.p50);
    e2e.points.emplace_back(r.output_token_throughput, r.e2e_ms.p50);
  }
  e2e.point_labels = labels;
  chart.series = {ttft, tpot, e2e};
  return chart;
}

}  // namespace tpserve
