// What a load test measured, computed from per-request records: the figures vllm bench serve and
// genai-perf report (request and output-token throughput; TTFT, TPOT, ITL, E2E mean and
// percentiles; goodput against SLOs; errors by status). Pure functions, tested on known data.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "benchmarks/svg_chart.h"

namespace tpserve {

struct RequestRecord {
  bool ok = false;
  std::string error_code;        // when !ok: the gRPC status name, or "HTTP 404: message"
  double ttft_s = 0;             // send -> first token
  double e2e_s = 0;              // send -> last message
  int output_tokens = 0;
  std::vector<double> itl_s;     // gaps between consecutive token arrivals
};

struct Distribution {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0;
  size_t count = 0;
};

// Percentile with linear interpolation between closest ranks (numpy's default), p in [0, 100].
double Percentile(std::vector<double> values, double p);
Distribution Summarize(const std::vector<double>& values);

struct Slo {
  double ttft_ms = 0;  // 0: no limit
  double tpot_ms = 0;
};

struct LoadReport {
  double duration_s = 0;
  size_t sent = 0, completed = 0, failed = 0;
  std::map<std::string, size_t> errors;  // by status code
  double request_throughput = 0;         // completed / s
  double output_token_throughput = 0;    // tokens / s
  size_t output_tokens = 0;
  Distribution ttft_ms, tpot_ms, itl_ms, e2e_ms;
  size_t good = 0;                       // completed requests meeting every SLO
  double goodput = 0;                    // good / s
};

// TPOT: (e2e - ttft) / (output_tokens - 1), for requests with at least two tokens.
double TimePerOutputToken(const RequestRecord& r);
bool MeetsSlo(const RequestRecord& r, const Slo& slo);
LoadReport BuildReport(const std::vector<RequestRecord>& records, double duration_s, const Slo& slo);

// Throughput vs latency across a sweep: x = output tokens/s, y = TTFT / TPOT / E2E p50 (ms),
// one point per run; `labels` name the runs (e.g. "c=4").
LineChart LoadCurveChart(const std::vector<LoadReport>& runs, const std::vector<std::string>& labels = {});

}  // namespace tpserve
