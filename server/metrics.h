// Server metrics in Prometheus' text exposition format (names follow vLLM's, prefixed tpserve_),
// shared by the /metrics endpoint and the Stats RPC. Thread-safe; recording is a short critical
// section and never allocates on the hot path once a label has been seen.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tpserve {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double value);

  struct Snapshot {
    std::vector<double> upper_bounds;
    std::vector<uint64_t> counts;  // per bucket, last one is +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot Get() const;

 private:
  mutable std::mutex mutex_;
  std::vector<double> upper_bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

std::vector<double> LatencyBuckets();      // 1 ms .. 60 s
std::vector<double> FineLatencyBuckets();  // 1 µs .. 1 s (collectives, step parts)

// Seconds since the Unix epoch (Prometheus' process_start_time_seconds).
double NowSeconds();

struct ServerMetrics {
  Histogram time_to_first_token{LatencyBuckets()};
  Histogram inter_token_latency{LatencyBuckets()};
  Histogram e2e_request_latency{LatencyBuckets()};
  Histogram request_time_per_output_token{LatencyBuckets()};  // a request's decode time / (tokens - 1)
  Histogram request_queue_time{LatencyBuckets()};
  Histogram step_compute{FineLatencyBuckets()};
  Histogram step_comm{FineLatencyBuckets()};
  Histogram step_host{FineLatencyBuckets()};

  std::atomic<int> requests_running{0};
  std::atomic<int> requests_waiting{0};
  std::atomic<double> kv_cache_usage{0};
  std::atomic<int> kv_blocks_free{0};
  std::atomic<int> kv_blocks_total{0};
  std::atomic<uint64_t> steps{0};
  std::atomic<uint64_t> preemptions{0};
  std::atomic<uint64_t> max_batch_seen{0};
  // Monitoring (deploy/monitoring, issue 34): whether the engine serves (1) or has failed (0, the
  // process exits soon after), when the process started, and token counts.
  std::atomic<int> engine_healthy{1};
  const double process_start_time_seconds = NowSeconds();
  std::atomic<uint64_t> prompt_tokens{0};      // prompt tokens computed (prefix-cache hits excluded)
  std::atomic<uint64_t> generation_tokens{0};  // tokens sampled
  std::atomic<uint64_t> prefix_cache_queries{0};  // tokens looked up in the prefix cache
  std::atomic<uint64_t> prefix_cache_hits{0};     // tokens found there
  std::atomic<int> kv_blocks_cached{0};
  std::atomic<uint64_t> queue_full_rejections{0};  // requests refused because --max-queue were waiting
  // A multi-process group (its leader's view): the members it was started with, and a probe for
  // those still connected (their rendezvous connection open; null: one process).
  int group_size = 1;
  std::function<int()> group_members_connected;

  void ObserveAllReduce(int64_t bytes, double seconds);
  void CountFinished(const std::string& finish_reason);
  void CountError(const std::string& code);
  uint64_t finished_total() const;

  std::map<int64_t, Histogram::Snapshot> AllReduceSnapshot() const;
  std::string RenderPrometheus() const;

 private:
  mutable std::mutex mutex_;
  std::map<int64_t, std::unique_ptr<Histogram>> allreduce_;  // by message bytes
  std::map<std::string, uint64_t> finished_;                 // by finish reason
  // By status code name. The codes a request can fail with are there at 0 from the start, so that
  // a rate over them reads 0 rather than no data before the first error.
  std::map<std::string, uint64_t> errors_ = {{"INVALID_ARGUMENT", 0}, {"RESOURCE_EXHAUSTED", 0}, {"UNAVAILABLE", 0},
                                             {"DEADLINE_EXCEEDED", 0}, {"UNAUTHENTICATED", 0}, {"INTERNAL", 0}};
};

}  // namespace tpserve
