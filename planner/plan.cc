#include "planner/plan.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <utility>

namespace tpserve::planner {
namespace {

std::string Format(const char* format, auto... args) {
  char line[512];
  std::snprintf(line, sizeof(line), format, args...);
  return line;
}

std::vector<Recommendation> Recommend(const PlanReport& r) {
  std::vector<Recommendation> out;
  for (int batch : r.options.batch) {
    for (int context : r.options.context) {
      std::vector<const DecodePrediction*> rows;  // this (batch, context), ascending TP
      for (const DecodePrediction& row : r.rows) {
        if (row.point.batch == batch && row.point.context == context) rows.push_back(&row);
      }
      std::sort(rows.begin(), rows.end(), [](auto* a, auto* b) { return a->point.tp < b->point.tp; });
      std::vector<const DecodePrediction*> fitting;
      for (auto* row : rows) {
        if (row->fits) fitting.push_back(row);
      }
      const std::string where = Format("batch %d, context %d", batch, context);
      if (fitting.empty()) {
        if (!rows.empty()) {
          out.push_back({"none_fits", batch, context, 0, 1,
                         Format("%s: no TP in the sweep fits in memory (TP=%d holds at most batch %d)", where.c_str(),
                                rows.back()->point.tp, rows.back()->max_batch)});
        }
        continue;
      }
      if (r.options.slo_tpot_ms) {
        const double slo = *r.options.slo_tpot_ms;
        const DecodePrediction* meets = nullptr;
        for (auto* row : fitting) {
          if (row->step_ms <= slo) {
            meets = row;
            break;
          }
        }
        const DecodePrediction* fastest = *std::min_element(
            fitting.begin(), fitting.end(), [](auto* a, auto* b) { return a->step_ms < b->step_ms; });
        if (meets != nullptr) {
          out.push_back({"smallest_tp_meeting_slo", batch, context, meets->point.tp, 1,
                         Format("%s: TP=%d is the smallest degree that fits and meets %.1f ms per token (%.2f ms)",
                                where.c_str(), meets->point.tp, slo, meets->step_ms)});
        } else {
          out.push_back({"smallest_tp_meeting_slo", batch, context, 0, 1,
                         Format("%s: no TP meets %.1f ms per token; the fastest that fits is TP=%d at %.2f ms%s",
                                where.c_str(), slo, fastest->point.tp, fastest->step_ms,
                                fastest->latency_bound_comm ? " (its AllReduces are latency-bound)" : "")});
        }
      }
      const DecodePrediction* best = *std::max_element(fitting.begin(), fitting.end(), [](auto* a, auto* b) {
        return a->tokens_per_s_per_device < b->tokens_per_s_per_device;
      });
      std::string why = best->point.tp == fitting.front()->point.tp
                            ? "more devices split the weights but add AllReduces"
                            : "fewer devices do not fit or stream too much per device";
      if (best->comm_share > 0) why += Format(" (comm %.0f%% of its step)", 100 * best->comm_share);
      out.push_back({"best_tokens_per_device", batch, context, best->point.tp, 1,
                     Format("%s: TP=%d gives the most tokens/s per device, %.0f: %s", where.c_str(), best->point.tp,
                            best->tokens_per_s_per_device, why.c_str())});
      // Replicas: the devices of one larger group, used as groups of a smaller TP each serving the
      // same batch, under the SLO when one is given.
      const Recommendation* chosen = nullptr;
      Recommendation candidate;
      double best_gain = 1.0;
      for (auto* large : fitting) {
        for (auto* small : fitting) {
          if (small->point.tp >= large->point.tp || large->point.tp % small->point.tp != 0) continue;
          if (r.options.slo_tpot_ms && small->step_ms > *r.options.slo_tpot_ms) continue;
          const int replicas = large->point.tp / small->point.tp;
          const double gain = replicas * small->tokens_per_s / large->tokens_per_s;
          if (gain > best_gain) {
            best_gain = gain;
            candidate = {"replicas", batch, context, small->point.tp, replicas,
                         Format("%s: %d replicas of TP=%d give %.0f tokens/s on %d devices, %.2fx one TP=%d group "
                                "(%.0f tokens/s)",
                                where.c_str(), replicas, small->point.tp, replicas * small->tokens_per_s,
                                large->point.tp, gain, large->point.tp, large->tokens_per_s)};
            chosen = &candidate;
          }
        }
      }
      if (chosen != nullptr) out.push_back(*chosen);
    }
  }
  return out;
}

}  // namespace

Result<PlanReport> RunPlan(const ModelConfig& model, const std::string& model_name, const HardwareProfile& profile,
                           const PlanOptions& options) {
  if (options.tp.empty() || options.batch.empty() || options.context.empty()) {
    return InvalidArgument("--tp, --batch and --context need at least one value each");
  }
  PlanReport report{model_name, profile, options, {}, {}, {}};
  for (int tp : options.tp) {
    for (int batch : options.batch) {
      for (int context : options.context) {
        auto row = PredictDecodeStep(model, profile, options.engine, {tp, batch, context, options.weight_bytes});
        if (!row.ok()) {
          if (row.status().code() == StatusCode::kInvalidArgument && (batch < 1 || context < 1 || tp < 1)) {
            return row.status();
          }
          const std::string why = Format("TP=%d: %s", tp, row.status().message().c_str());
          if (std::find(report.skipped.begin(), report.skipped.end(), why) == report.skipped.end()) {
            report.skipped.push_back(why);
          }
          continue;
        }
        report.rows.push_back(*row);
      }
    }
  }
  report.recommendations = Recommend(report);
  return report;
}

std::string FormatPlan(const PlanReport& r) {
  std::string out = Format("model %s on %s (%s); weights %s; collectives: %s\n", r.model.c_str(), r.profile.name.c_str(),
                           r.profile.description.c_str(), r.options.weight_bytes == 1 ? "fp8" : "bf16",
                           r.profile.collective_fits.empty()
                               ? (std::string("NCCL ") + kNcclTuningVersion + " tuning model").c_str()
                               : "fitted from measurements (plan calibrate), NCCL's model elsewhere");
  if (!r.profile.calibration.empty()) out += "calibration: " + r.profile.calibration + "\n";
  out += "  tp batch context  step_ms  tok/s  tok/s/dev   gemm  attn   elem  allred  lmhead  logits  layer  launch  host  "
         "comm%   AR_us      fits  max_batch  GB/dev\n";
  for (const DecodePrediction& row : r.rows) {
    out += Format("  %2d %5d %7d %8.3f %6.0f %10.0f %6.3f %5.3f %6.3f %7.3f %7.3f %7.3f %6.3f %7.3f %5.3f %5.1f%% %7.1f%s %5s "
                  "%10d %7.1f\n",
                  row.point.tp, row.point.batch, row.point.context, row.step_ms, row.tokens_per_s,
                  row.tokens_per_s_per_device, row.gemm_ms, row.attention_ms, row.elementwise_ms, row.allreduce_ms,
                  row.lm_head_ms,
                  row.logits_ms, row.layer_overhead_ms, row.launch_ms, row.host_ms, 100 * row.comm_share,
                  row.allreduce.time_us,
                  row.latency_bound_comm ? "*" : " ", row.fits ? "yes" : "NO", row.max_batch,
                  row.weights_gb + row.kv_gb + row.activations_gb);
  }
  out += "  (* AllReduce latency-bound: its fixed latency is at least half its time)\n";
  for (const std::string& skipped : r.skipped) out += "  skipped " + skipped + "\n";
  for (const Recommendation& rec : r.recommendations) out += "  -> " + rec.reason + "\n";
  return out;
}

std::string PlanJson(const PlanReport& r) {
  nlohmann::json rows = nlohmann::json::array();
  for (const DecodePrediction& row : r.rows) {
    rows.push_back({{"tp", row.point.tp}, {"batch", row.point.batch}, {"context", row.point.context},
                    {"step_ms", row.step_ms}, {"tokens_per_s", row.tokens_per_s},
                    {"tokens_per_s_per_device", row.tokens_per_s_per_device}, {"comm_share", row.comm_share},
                    {"fits", row.fits}, {"max_batch", row.max_batch},
                    {"parts_ms",
                     {{"gemm", row.gemm_ms}, {"attention", row.attention_ms}, {"elementwise", row.elementwise_ms},
                      {"allreduce", row.allreduce_ms},
                      {"lm_head", row.lm_head_ms}, {"logits_gather", row.logits_ms},
                      {"layer_overhead", row.layer_overhead_ms}, {"launch", row.launch_ms}, {"host", row.host_ms}}},
                    {"allreduce",
                     {{"message_bytes", row.allreduce_message_bytes}, {"time_us", row.allreduce.time_us},
                      {"latency_us", row.allreduce.latency_us}, {"algorithm", row.allreduce.algorithm},
                      {"protocol", row.allreduce.protocol}, {"latency_bound", row.latency_bound_comm}}},
                    {"gemm_compute_bound", row.compute_bound_gemm},
                    {"memory_gb", {{"weights", row.weights_gb}, {"kv", row.kv_gb}, {"activations", row.activations_gb}}}});
  }
  nlohmann::json recs = nlohmann::json::array();
  for (const Recommendation& rec : r.recommendations) {
    recs.push_back({{"kind", rec.kind}, {"batch", rec.batch}, {"context", rec.context}, {"tp", rec.tp},
                    {"replicas", rec.replicas}, {"reason", rec.reason}});
  }
  nlohmann::json out = {{"model", r.model}, {"hardware", r.profile.name}, {"calibration", r.profile.calibration},
                        {"dtype", r.options.weight_bytes == 1 ? "fp8" : "bf16"},
                        {"nccl_tuning_version", kNcclTuningVersion}, {"rows", rows},
                        {"skipped", r.skipped}, {"recommendations", recs}};
  if (r.options.slo_tpot_ms) out["slo_tpot_ms"] = *r.options.slo_tpot_ms;
  return out.dump();
}

PanelChart PlanChart(const PlanReport& r) {
  const int context = r.options.context.front();
  PanelChart chart;
  chart.title = "predicted decode step by part: " + r.model + " on " + r.profile.name +
                ", context " + std::to_string(context);
  if (r.options.context.size() > 1) {
    std::string all;
    for (int c : r.options.context) all += (all.empty() ? "" : ", ") + std::to_string(c);
    chart.title += " (first of " + all + ")";
  }
  for (int batch : r.options.batch) {
    StackedBarChart panel;
    panel.title = Format("batch %d", batch);
    panel.x_label = "tensor-parallel degree";
    panel.y_label = "time per decode step (ms)";
    panel.parts = {"GEMMs", "attention", "elementwise", "AllReduce", "LM head", "logits gather", "per-layer overhead",
                   "launch", "host"};
    for (const DecodePrediction& row : r.rows) {
      if (row.point.batch != batch || row.point.context != context) continue;
      panel.categories.push_back(std::to_string(row.point.tp) + (row.fits ? "" : "\nno fit"));
      panel.values.push_back({row.gemm_ms, row.attention_ms, row.elementwise_ms, row.allreduce_ms, row.lm_head_ms,
                              row.logits_ms, row.layer_overhead_ms, row.launch_ms, row.host_ms});
    }
    chart.panels.push_back(std::move(panel));
  }
  return chart;
}

}  // namespace tpserve::planner
