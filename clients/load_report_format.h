// A load report as loadgen prints it: text in vllm bench serve's layout, or JSON (docs/API.md,
// loadgen --json's "runs"). `tpserve plan simulate` prints its predictions in the same form, so
// that a measured run and a simulated one read side by side.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "clients/load_stats.h"

namespace tpserve {

// The report's fields: sent, completed, failed, errors, duration_s, throughputs, output_tokens,
// good, goodput, and ttft_ms / tpot_ms / itl_ms / e2e_ms as {mean, p50, p90, p99, count}.
nlohmann::json LoadReportJson(const LoadReport& report);

// "============ <title> ============", the target, counts, errors, throughputs, goodput (when an
// SLO is set) and the four latency blocks, one line each, newline-terminated.
std::string FormatLoadReport(const LoadReport& report, const Slo& slo, const std::string& title,
                             const std::string& target);

}  // namespace tpserve
