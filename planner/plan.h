// `tpserve plan`: the decode model over a sweep of TP degrees, batch sizes and contexts, and what
// it recommends for each (batch, context): the smallest TP that meets the latency SLO, the best
// tokens/s per device, and where replicas of a smaller TP group beat one larger group.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "benchmarks/svg_chart.h"
#include "planner/decode_model.h"

namespace tpserve::planner {

struct PlanOptions {
  std::vector<int> tp = {1, 2, 4, 8};
  std::vector<int> batch = {1, 8, 32, 128};
  std::vector<int> context = {512, 2048};
  int weight_bytes = 2;                 // --dtype bf16 (2) or fp8 (1)
  std::optional<double> slo_tpot_ms;    // per-token latency bound
  EngineTraits engine;
};

struct Recommendation {
  std::string kind;  // smallest_tp_meeting_slo | best_tokens_per_device | replicas
  int batch = 0, context = 0;
  int tp = 0;        // the recommended TP (replicas: the smaller group's)
  int replicas = 1;  // replicas: groups of `tp` in the devices of one larger group
  std::string reason;  // one line
};

struct PlanReport {
  std::string model;  // as given (name or path)
  HardwareProfile profile;
  PlanOptions options;
  std::vector<DecodePrediction> rows;   // (tp, batch, context) in sweep order
  std::vector<std::string> skipped;     // points the model cannot run, and why
  std::vector<Recommendation> recommendations;
};

Result<PlanReport> RunPlan(const ModelConfig& model, const std::string& model_name, const HardwareProfile& profile,
                           const PlanOptions& options);
std::string FormatPlan(const PlanReport& report);
std::string PlanJson(const PlanReport& report);
// Predicted step time stacked by part against TP at the first context, one panel per batch size,
// each on its own scale; a TP that does not fit in memory says so under its bar.
PanelChart PlanChart(const PlanReport& report);

}  // namespace tpserve::planner
