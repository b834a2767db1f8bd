#include "clients/load_report_format.h"

#include <fmt/format.h>

namespace tpserve {
namespace {

nlohmann::json DistributionJson(const Distribution& d) {
  return {{"mean", d.mean}, {"p50", d.p50}, {"p90", d.p90}, {"p99", d.p99}, {"count", d.count}};
}

}  // namespace

nlohmann::json LoadReportJson(const LoadReport& p) {
  return {{"sent", p.sent},
          {"completed", p.completed},
          {"failed", p.failed},
          {"errors", p.errors},
          {"duration_s", p.duration_s},
          {"request_throughput", p.request_throughput},
          {"output_token_throughput", p.output_token_throughput},
          {"output_tokens", p.output_tokens},
          {"good", p.good},
          {"goodput", p.goodput},
          {"ttft_ms", DistributionJson(p.ttft_ms)},
          {"tpot_ms", DistributionJson(p.tpot_ms)},
          {"itl_ms", DistributionJson(p.itl_ms)},
          {"e2e_ms", DistributionJson(p.e2e_ms)}};
}

std::string FormatLoadReport(const LoadReport& p, const Slo& slo, const std::string& title,
                             const std::string& target) {
  std::string out = fmt::format("============ {} ============\n", title);
  auto line = [&out](const char* name, const std::string& value) { out += fmt::format("{:<40} {}\n", name, value); };
  line("Target:", target);
  line("Successful requests:", std::to_string(p.completed));
  line("Failed requests:", std::to_string(p.failed));
  for (const auto& [code, n] : p.errors) out += fmt::format("  {:<38} {}\n", code, n);
  line("Benchmark duration (s):", fmt::format("{:.2f}", p.duration_s));
  line("Request throughput (req/s):", fmt::format("{:.2f}", p.request_throughput));
  line("Output token throughput (tok/s):", fmt::format("{:.1f}", p.output_token_throughput));
  line("Total output tokens:", std::to_string(p.output_tokens));
  if (slo.ttft_ms > 0 || slo.tpot_ms > 0) line("Goodput (req/s):", fmt::format("{:.2f} ({} good)", p.goodput, p.good));
  auto block = [&out](const char* name, const Distribution& d) {
    out += fmt::format("---- {} (ms) ----\n  mean {:9.2f}   p50 {:9.2f}   p90 {:9.2f}   p99 {:9.2f}\n", name, d.mean,
                       d.p50, d.p90, d.p99);
  };
  block("Time to first token", p.ttft_ms);
  block("Time per output token (excl. 1st)", p.tpot_ms);
  block("Inter-token latency (per message)", p.itl_ms);
  block("End-to-end latency", p.e2e_ms);
  return out;
}

}  // namespace tpserve
