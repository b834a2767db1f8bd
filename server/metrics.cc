#include "server/metrics.h"

#include <chrono>
#include <cstdio>
#include <memory>

namespace tpserve {

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), counts_(upper_bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  size_t bucket = 0;
  while (bucket < upper_bounds_.size() && value > upper_bounds_[bucket]) ++bucket;
  std::lock_guard<std::mutex> lock(mutex_);
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

Histogram::Snapshot Histogram::Get() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {upper_bounds_, counts_, sum_, count_};
}

std::vector<double> LatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0};
}

std::vector<double> FineLatencyBuckets() {
  return {1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 1.0};
}

void ServerMetrics::ObserveAllReduce(int64_t bytes, double seconds) {
  Histogram* histogram;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& slot = allreduce_[bytes];
    if (!slot) slot = std::make_unique<Histogram>(FineLatencyBuckets());
    histogram = slot.get();
  }
  histogram->Observe(seconds);
}

void ServerMetrics::CountFinished(const std::string& finish_reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++finished_[finish_reason];
}

void ServerMetrics::CountError(const std::string& code) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++errors_[code];
}

uint64_t ServerMetrics::finished_total() const {
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t total = 0;
  for (const auto& [reason, n] : finished_) total += n;
  return total;
}

std::map<int64_t, Histogram::Snapshot> ServerMetrics::AllReduceSnapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::map<int64_t, Histogram::Snapshot> out;
  for (const auto& [bytes, h] : allreduce_) out[bytes] = h->Get();
  return out;
}

namespace {

std::string Number(double v) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.9g", v);
  return text;
}

void RenderHistogram(std::string* out, const std::string& name, const std::string& labels,
                     const Histogram::Snapshot& h) {
  uint64_t cumulative = 0;
  const std::string sep = labels.empty() ? "" : ",";
  for (size_t i = 0; i < h.counts.size(); ++i) {
    cumulative += h.counts[i];
    const std::string le = i < h.upper_bounds.size() ? Number(h.upper_bounds[i]) : "+Inf";
    *out += name + "_bucket{" + labels + sep + "le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  const std::string braces = labels.empty() ? "" : "{" + labels + "}";
  *out += name + "_sum" + braces + " " + Number(h.sum) + "\n";
  *out += name + "_count" + braces + " " + std::to_string(h.count) + "\n";
}

void Header(std::string* out, const std::string& name, const char* type, const char* help) {
  *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

}  // namespace

std::string ServerMetrics::RenderPrometheus() const {
  std::string out;
  auto histogram = [&](const char* name, const char* help, const Histogram& h) {
    Header(&out, name, "histogram", help);
    RenderHistogram(&out, name, "", h.Get());
  };
  histogram("tpserve_time_to_first_token_seconds", "Time from request arrival to its first token.", time_to_first_token);
  histogram("tpserve_inter_token_latency_seconds", "Time between consecutive tokens of a request.", inter_token_latency);
  histogram("tpserve_e2e_request_latency_seconds", "Time from request arrival to its last token.", e2e_request_latency);
  histogram("tpserve_request_queue_time_seconds", "Time from request arrival to its first step.", request_queue_time);
  histogram("tpserve_request_time_per_output_token_seconds",
            "A finished request's time per output token after the first (TPOT).", request_time_per_output_token);

  Header(&out, "tpserve_step_duration_seconds", "histogram", "Engine step time by part (slowest rank).");
  RenderHistogram(&out, "tpserve_step_duration_seconds", "part=\"compute\"", step_compute.Get());
  RenderHistogram(&out, "tpserve_step_duration_seconds", "part=\"comm\"", step_comm.Get());
  RenderHistogram(&out, "tpserve_step_duration_seconds", "part=\"host\"", step_host.Get());

  Header(&out, "tpserve_allreduce_latency_seconds", "histogram", "AllReduce latency by message size.");
  for (const auto& [bytes, h] : AllReduceSnapshot()) {
    RenderHistogram(&out, "tpserve_allreduce_latency_seconds", "bytes=\"" + std::to_string(bytes) + "\"", h);
  }

  auto gauge = [&](const char* name, const char* help, double value) {
    Header(&out, name, "gauge", help);
    out += std::string(name) + " " + Number(value) + "\n";
  };
  gauge("tpserve_num_requests_running", "Sequences in the running batch.", requests_running.load());
  gauge("tpserve_num_requests_waiting", "Requests waiting to be scheduled.", requests_waiting.load());
  gauge("tpserve_kv_cache_usage_ratio", "Fraction of KV-cache blocks in use.", kv_cache_usage.load());
  auto counter = [&](const char* name, const char* help, uint64_t value) {
    Header(&out, name, "counter", help);
    out += std::string(name) + " " + std::to_string(value) + "\n";
  };
  gauge("tpserve_engine_healthy", "1 while the engine serves; 0 once it failed (the process then exits).",
        engine_healthy.load());
  {
    // Millisecond precision: %.9g would round an epoch time to tens of seconds.
    Header(&out, "process_start_time_seconds", "gauge", "Start time of the process since the Unix epoch in seconds.");
    char line[64];
    std::snprintf(line, sizeof(line), "process_start_time_seconds %.3f\n", process_start_time_seconds);
    out += line;
  }
  counter("tpserve_num_preemptions_total", "Sequences preempted (their KV freed, to be recomputed).",
          preemptions.load());
  counter("tpserve_prompt_tokens_total", "Prompt tokens computed (those found in the prefix cache excluded).",
          prompt_tokens.load());
  counter("tpserve_generation_tokens_total", "Tokens generated.", generation_tokens.load());
  counter("tpserve_queue_full_rejections_total", "Requests refused because the queue was full (--max-queue).",
          queue_full_rejections.load());
  gauge("tpserve_group_size", "Processes the tensor-parallel group was started with (1: one process).", group_size);
  gauge("tpserve_group_members", "Members of the group still connected to its leader.",
        group_members_connected ? group_members_connected() : group_size);
  counter("tpserve_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
          prefix_cache_queries.load());
  counter("tpserve_prefix_cache_hits_total", "Prompt tokens found in the prefix cache (KV reused).",
          prefix_cache_hits.load());

  std::lock_guard<std::mutex> lock(mutex_);
  Header(&out, "tpserve_requests_total", "counter", "Finished requests by finish reason.");
  for (const char* reason : {"length", "stop", "cancelled"}) {
    auto it = finished_.find(reason);
    out += std::string("tpserve_requests_total{finish_reason=\"") + reason + "\"} " +
           std::to_string(it == finished_.end() ? 0 : it->second) + "\n";
  }
  Header(&out, "tpserve_request_errors_total", "counter", "Failed requests by gRPC status code.");
  for (const auto& [code, n] : errors_) {
    out += "tpserve_request_errors_total{code=\"" + code + "\"} " + std::to_string(n) + "\n";
  }
  return out;
}

}  // namespace tpserve
