// `tpserve plan simulate`: one workload (loadgen's), simulated through the server's own serving
// loop (SimulateServing) at each TP degree and replica count, each step timed by the step model
// (PredictStepTime). Per configuration and load level it reports what loadgen would measure, with
// goodput per GPU, and for each load level it recommends the configuration that keeps the SLOs
// with the most goodput per GPU.
#pragma once

#include <string>
#include <vector>

#include "benchmarks/svg_chart.h"
#include "clients/load_stats.h"
#include "engine/step/serving_core.h"
#include "planner/decode_model.h"
#include "planner/serving_simulation.h"

namespace tpserve::planner {

struct ServingPlanOptions {
  std::vector<int> tp = {1, 2, 4, 8};
  std::vector<int> replicas = {1};  // requests are split round-robin across them
  int weight_bytes = 2;             // bf16 (2) or fp8 (1)
  EngineTraits engine;
  // Load levels: each rate (open loop, arrivals as loadgen draws them), or else one closed loop at
  // `concurrency` requests in flight (split across replicas as evenly as it goes).
  std::vector<double> rates;
  int concurrency = 1;
  double burstiness = 1;
  uint64_t seed = 0;
  Slo slo;
  double slo_attainment = 0.9;  // a configuration meets the SLOs when this share of requests does
  ServingOptions serving;       // serve's scheduler flags; max_model_len 0: the model's
  int block_size = 16;
  // KV cache per replica: exact blocks when > 0; else MB across its ranks as the CPU engine takes
  // --kv-cache-mb; else what the profile's memory holds beside the weights (a cpu profile: the
  // CPU engine's default, 256 MB).
  int kv_cache_blocks = 0;
  int kv_cache_mb = 0;
};

// One (TP, replicas, load level) simulated.
struct ServingRun {
  int tp = 1, replicas = 1;
  int gpus = 1;              // tp × replicas
  double rate = 0;           // > 0: open loop
  int concurrency = 0;       // closed loop
  int kv_blocks = 0;         // per replica
  LoadReport report;         // as loadgen would report it
  double goodput_per_gpu = 0;
  double slo_attainment = 0;  // good / sent
  size_t steps = 0;           // over all replicas
  double mean_batch = 0;      // sequences per step
};

struct ServingRecommendation {
  double rate = 0;
  int concurrency = 0;
  int tp = 0, replicas = 0;
  bool meets_slo = false;
  std::string reason;  // one line
};

struct ServingPlanReport {
  std::string model;  // as given
  HardwareProfile profile;
  ServingPlanOptions options;
  std::vector<ServingRun> runs;  // per (tp, replicas) in sweep order, the load levels within
  std::vector<std::string> skipped;  // configurations the model cannot run, and why
  std::vector<ServingRecommendation> recommendations;  // one per load level
};

// `requests` give the lengths (arrival_s is ignored: each load level sets it).
Result<ServingPlanReport> RunServingPlan(const ModelConfig& model, const std::string& model_name,
                                         const HardwareProfile& profile,
                                         const std::vector<SimulatedRequest>& requests,
                                         const ServingPlanOptions& options);

std::string FormatServingPlan(const ServingPlanReport& report);  // every run as loadgen prints it, a table, the recommendations
std::string ServingPlanJson(const ServingPlanReport& report);
// Goodput per GPU against the load level, one line per (TP, replicas).
LineChart ServingPlanChart(const ServingPlanReport& report);

}  // namespace tpserve::planner
