#include "common/median.h"
#include "engine/step/trace_report.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

namespace tpserve {
namespace {

bool IsDecodeOnly(const StepTrace& s) { return s.prefill_tokens == 0 && s.decode_tokens > 0; }

std::string Bytes(int64_t b) {
  char text[32];
  if (b >= 1 << 20) std::snprintf(text, sizeof(text), "%.1f MiB", b / 1048576.0);
  else if (b >= 1 << 10) std::snprintf(text, sizeof(text), "%.1f KiB", b / 1024.0);
  else std::snprintf(text, sizeof(text), "%lld B", static_cast<long long>(b));
  return text;
}

}  // namespace

TraceSummary Summarize(const std::vector<StepTrace>& steps) {
  TraceSummary s;
  int64_t comm_ns = 0, forward_ns = 0, host_ns = 0, decode_wall_ns = 0;
  for (const StepTrace& step : steps) {
    ++s.steps;
    s.prefill_tokens += step.prefill_tokens;
    s.cached_tokens += step.cached_tokens;
    if (!IsDecodeOnly(step)) {
      ++s.prefill_steps;
      s.prefill_s += step.step_ns * 1e-9;
      continue;
    }
    ++s.decode_steps;
    s.decode_tokens += step.decode_tokens;
    decode_wall_ns += step.step_ns;
    const RankTrace& slowest = step.ranks[step.SlowestRank()];
    if (step.per_op) {  // the comm share from the steps that timed their collectives
      comm_ns += slowest.CommNs();
      forward_ns += slowest.total_ns;
    }
    host_ns += step.HostNs();
  }
  s.decode_s = decode_wall_ns * 1e-9;
  if (s.decode_s > 0) s.decode_tokens_per_s = s.decode_tokens / s.decode_s;
  if (forward_ns > 0) s.comm_share = static_cast<double>(comm_ns) / forward_ns;
  if (decode_wall_ns > 0) s.host_share = static_cast<double>(host_ns) / decode_wall_ns;
  if (s.decode_steps > 0) s.mean_decode_step_ms = s.decode_s * 1e3 / s.decode_steps;
  return s;
}

std::string FormatProfile(const std::vector<StepTrace>& steps) {
  const TraceSummary summary = Summarize(steps);
  // Per op: total time over decode steps on the slowest rank of each step.
  std::map<OpKind, int64_t> op_ns;
  std::map<int64_t, std::vector<double>> allreduce_us;  // by message bytes, every rank
  int64_t total_ns = 0;
  int batch = 0;
  for (const StepTrace& step : steps) {
    if (!IsDecodeOnly(step) || !step.per_op) continue;
    batch = std::max(batch, step.batch_size);
    const RankTrace& slowest = step.ranks[step.SlowestRank()];
    total_ns += slowest.total_ns;
    for (const OpRecord& op : slowest.ops) op_ns[op.op] += op.duration_ns;
    for (const RankTrace& rank : step.ranks) {
      for (const OpRecord& op : rank.ops) {
        if (op.op == OpKind::kAllReduceAttn || op.op == OpKind::kAllReduceMlp) {
          allreduce_us[op.bytes].push_back(op.duration_ns * 1e-3);
        }
      }
    }
  }
  std::string out;
  char line[256];
  std::snprintf(line, sizeof(line),
                "profile: %d steps (%d with prompt tokens, %d decode-only), %lld decode tokens, "
                "%.1f tokens/s, %.2f ms per decode step\n",
                summary.steps, summary.prefill_steps, summary.decode_steps,
                static_cast<long long>(summary.decode_tokens), summary.decode_tokens_per_s,
                summary.mean_decode_step_ms);
  out += line;
  std::snprintf(line, sizeof(line), "prompt tokens: %lld computed, %lld taken from the prefix cache\n",
                static_cast<long long>(summary.prefill_tokens), static_cast<long long>(summary.cached_tokens));
  out += line;
  if (summary.decode_steps == 0) return out + "(no decode-only steps to break down)\n";
  std::snprintf(line, sizeof(line),
                "decode at batch %d: comm %.1f%% of forward time (slowest rank), host %.1f%% of "
                "step time\n",
                batch, 100 * summary.comm_share, 100 * summary.host_share);
  out += line;
  std::vector<double> plan_send_us;  // multi-process TP: the leader sending each plan
  for (const StepTrace& step : steps) {
    if (step.plan_send_ns > 0 && IsDecodeOnly(step)) plan_send_us.push_back(step.plan_send_ns * 1e-3);
  }
  if (!plan_send_us.empty()) {
    std::sort(plan_send_us.begin(), plan_send_us.end());
    std::snprintf(line, sizeof(line), "plan sent to the followers: median %.1f us per decode step (host time)\n",
                  plan_send_us[plan_send_us.size() / 2]);
    out += line;
  }
  std::vector<std::pair<OpKind, int64_t>> ranked(op_ns.begin(), op_ns.end());
  std::sort(ranked.begin(), ranked.end(), [](auto& a, auto& b) { return a.second > b.second; });
  out += "  op                     ms/step   share\n";
  for (const auto& [op, ns] : ranked) {
    std::snprintf(line, sizeof(line), "  %-20s %9.3f %6.1f%%%s\n", std::string(OpName(op)).c_str(),
                  ns * 1e-6 / summary.decode_steps, 100.0 * ns / total_ns,
                  IsCollective(op) ? "  (collective)" : "");
    out += line;
  }
  if (!allreduce_us.empty()) {
    out += "  AllReduce latency by message size (all ranks, decode steps):\n";
    for (const auto& [bytes, samples] : allreduce_us) {
      std::vector<double> sorted = samples;
      std::sort(sorted.begin(), sorted.end());
      std::snprintf(line, sizeof(line), "    %10s  median %8.2f us  p90 %8.2f us  (%zu calls)\n",
                    Bytes(bytes).c_str(), Median(sorted), sorted[sorted.size() * 9 / 10],
                    sorted.size());
      out += line;
    }
  }
  return out;
}

Status WriteChromeTrace(const std::vector<StepTrace>& steps, const std::string& path) {
  nlohmann::json events = nlohmann::json::array();
  double step_offset_us = 0;
  for (const StepTrace& step : steps) {
    // A counter track per step: prompt tokens computed against prompt tokens reused from the
    // prefix cache, and decode tokens.
    events.push_back({{"name", "tokens"}, {"ph", "C"}, {"ts", step_offset_us}, {"pid", 0},
                      {"args", {{"prefilled", step.prefill_tokens}, {"reused (prefix cache)", step.cached_tokens},
                                {"decoded", step.decode_tokens}}}});
    for (const RankTrace& rank : step.ranks) {
      for (const OpRecord& op : rank.ops) {
        nlohmann::json event = {{"name", std::string(OpName(op.op))},
                                {"cat", IsCollective(op.op) ? "comm" : "compute"},
                                {"ph", "X"},
                                {"ts", step_offset_us + op.start_ns * 1e-3},
                                {"dur", op.duration_ns * 1e-3},
                                {"pid", 0},
                                {"tid", rank.rank},
                                {"args", {{"layer", op.layer}, {"step", step.step_id}}}};
        if (op.bytes > 0) event["args"]["bytes"] = op.bytes;
        events.push_back(std::move(event));
      }
    }
    step_offset_us += step.step_ns * 1e-3;
  }
  for (size_t r = 0; !steps.empty() && r < steps.front().ranks.size(); ++r) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", r},
                      {"args", {{"name", "rank " + std::to_string(r)}}}});
  }
  std::ofstream out(path);
  if (!out) return FailedPrecondition(path + ": cannot create trace file");
  out << nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() << "\n";
  if (!out) return FailedPrecondition(path + ": write failed");
  return Status::Ok();
}

}  // namespace tpserve
