#include "planner/serving_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "clients/arrival_schedule.h"
#include "clients/load_report_format.h"
#include "model/weight_layout.h"

namespace tpserve::planner {
namespace {

// The CPU engine's KV cache when --kv-cache-mb is not given (engine/engine.cc).
constexpr int kCpuDefaultKvCacheMb = 256;

std::string LevelName(double rate, int concurrency) {
  return rate > 0 ? fmt::format("rate {:g} req/s", rate) : fmt::format("concurrency {}", concurrency);
}

std::string Gpus(int n) { return n == 1 ? "1 GPU" : fmt::format("{} GPUs", n); }

std::string ConfigName(int tp, int replicas) {
  return replicas == 1 ? fmt::format("TP={}", tp) : fmt::format("TP={} x {} replicas", tp, replicas);
}

// KV cache blocks of one replica (a TP group), as serve would have on this hardware.
Result<int> KvBlocksPerReplica(const ModelConfig& model, const HardwareProfile& profile, const ServingPlanOptions& o,
                               int tp) {
  if (o.kv_cache_blocks > 0) return o.kv_cache_blocks;
  const double bytes_per_position = KvBytesPerPosition(model, o.engine, tp);
  double positions = 0;  // per rank
  const int mb = o.kv_cache_mb > 0 ? o.kv_cache_mb : profile.device_kind == "cpu" ? kCpuDefaultKvCacheMb : 0;
  if (mb > 0) {
    positions = (static_cast<double>(mb) * (1 << 20)) / (bytes_per_position * tp);
  } else {
    positions = KvCapacityPositions(model, profile, o.engine, tp, o.weight_bytes, o.serving.scheduler.max_batched_tokens);
  }
  const int blocks = static_cast<int>(std::min(positions / o.block_size, 1e9));
  if (blocks < 1) {
    return FailedPrecondition(fmt::format("TP={}: no KV cache block fits beside the weights on {}", tp, profile.name));
  }
  return blocks;
}

// Every request of the workload through `replicas` simulated servers of TP=`tp` at one load level.
Result<ServingRun> SimulateLevel(const ModelConfig& model, const HardwareProfile& profile,
                                 const std::vector<SimulatedRequest>& lengths, const ServingPlanOptions& o, int tp,
                                 int replicas, int kv_blocks, double rate) {
  ServingRun run{.tp = tp, .replicas = replicas, .gpus = tp * replicas, .rate = rate,
                 .concurrency = rate > 0 ? 0 : o.concurrency, .kv_blocks = kv_blocks};
  std::vector<double> arrivals;
  if (rate > 0) arrivals = ArrivalTimes(rate, static_cast<int>(lengths.size()), o.seed, o.burstiness);
  Status step_error = Status::Ok();
  const StepSeconds step_seconds = [&](const ScheduleDecision& decision) {
    auto time = PredictStepTime(model, profile, o.engine, ShapeOfStep(decision.plan, tp, o.weight_bytes, profile.attention_query_tile));
    if (!time.ok()) {
      if (step_error.ok()) step_error = time.status();
      return 0.0;
    }
    return time->step_ms * 1e-3;
  };
  std::vector<RequestRecord> records(lengths.size());
  double duration = 0, sequences = 0;
  for (int r = 0; r < replicas; ++r) {
    std::vector<SimulatedRequest> mine;  // round-robin: requests r, r + replicas, ...
    for (size_t i = r; i < lengths.size(); i += replicas) {
      mine.push_back(lengths[i]);
      mine.back().arrival_s = rate > 0 ? arrivals[i] : 0;
    }
    if (mine.empty()) continue;
    // Closed loop: the clients split as evenly as they go, at least one per replica.
    const int concurrency =
        rate > 0 ? 0 : std::max(1, o.concurrency / replicas + (r < o.concurrency % replicas ? 1 : 0));
    ServingOptions serving = o.serving;
    serving.scheduler.block_size = o.block_size;
    ASSIGN_OR_RETURN(SimulationResult result, SimulateServing(mine, serving, kv_blocks, step_seconds, concurrency));
    RETURN_IF_ERROR(step_error);
    for (size_t k = 0; k < result.records.size(); ++k) records[r + k * replicas] = std::move(result.records[k]);
    duration = std::max(duration, result.duration_s);
    run.steps += result.steps.size();
    for (const SimulatedStep& step : result.steps) sequences += step.sequences;
  }
  run.report = BuildReport(records, duration, o.slo);
  run.goodput_per_gpu = run.report.goodput / run.gpus;
  run.slo_attainment = run.report.sent > 0 ? static_cast<double>(run.report.good) / run.report.sent : 0;
  run.mean_batch = run.steps > 0 ? sequences / run.steps : 0;
  return run;
}

// For each load level: the most goodput per GPU among the configurations that meet the SLOs (ties:
// fewer GPUs), else the configuration closest to meeting them.
std::vector<ServingRecommendation> Recommend(const ServingPlanReport& r) {
  std::vector<ServingRecommendation> out;
  const std::vector<double> levels = r.options.rates.empty() ? std::vector<double>{0} : r.options.rates;
  const bool has_slo = r.options.slo.ttft_ms > 0 || r.options.slo.tpot_ms > 0;
  const std::string kept = has_slo ? "within the SLOs" : "completed";
  for (double rate : levels) {
    std::vector<const ServingRun*> runs, meeting;
    for (const ServingRun& run : r.runs) {
      if (run.rate != rate) continue;
      runs.push_back(&run);
      if (run.slo_attainment >= r.options.slo_attainment) meeting.push_back(&run);
    }
    if (runs.empty()) continue;
    ServingRecommendation rec{.rate = rate, .concurrency = rate > 0 ? 0 : r.options.concurrency};
    const std::string level = LevelName(rate, rec.concurrency);
    const ServingRun* best = nullptr;
    if (!meeting.empty()) {
      best = *std::max_element(meeting.begin(), meeting.end(), [](const ServingRun* a, const ServingRun* b) {
        return a->goodput_per_gpu != b->goodput_per_gpu ? a->goodput_per_gpu < b->goodput_per_gpu : a->gpus > b->gpus;
      });
      rec.meets_slo = true;
      rec.reason = fmt::format(
          "{}: {} ({}) gives the most goodput per GPU, {:.3g} req/s, of the {} of {} configurations that keep "
          "{:.0f}% of requests {} (it keeps {:.1f}%)",
          level, ConfigName(best->tp, best->replicas), Gpus(best->gpus), best->goodput_per_gpu, meeting.size(), runs.size(),
          100 * r.options.slo_attainment, kept, 100 * best->slo_attainment);
    } else {
      best = *std::max_element(runs.begin(), runs.end(), [](const ServingRun* a, const ServingRun* b) {
        return a->slo_attainment != b->slo_attainment ? a->slo_attainment < b->slo_attainment
                                                      : a->goodput_per_gpu < b->goodput_per_gpu;
      });
      rec.reason = fmt::format(
          "{}: no configuration keeps {:.0f}% of requests {}; the closest is {} ({}) at {:.1f}% (TTFT p90 "
          "{:.0f} ms, TPOT p90 {:.1f} ms)",
          level, 100 * r.options.slo_attainment, kept, ConfigName(best->tp, best->replicas), Gpus(best->gpus),
          100 * best->slo_attainment, best->report.ttft_ms.p90, best->report.tpot_ms.p90);
    }
    rec.tp = best->tp;
    rec.replicas = best->replicas;
    out.push_back(rec);
  }
  return out;
}

}  // namespace

Result<ServingPlanReport> RunServingPlan(const ModelConfig& model, const std::string& model_name,
                                         const HardwareProfile& profile,
                                         const std::vector<SimulatedRequest>& requests,
                                         const ServingPlanOptions& options) {
  if (requests.empty()) return InvalidArgument("plan simulate: no requests");
  if (options.tp.empty() || options.replicas.empty()) return InvalidArgument("plan simulate: --tp and --replicas need values");
  for (int replicas : options.replicas) {
    if (replicas < 1) return InvalidArgument("plan simulate: --replicas must be at least 1");
  }
  if (options.rates.empty() && options.concurrency < 1) {
    return InvalidArgument("plan simulate: --concurrency must be at least 1");
  }
  if (options.block_size < 1) return InvalidArgument("plan simulate: --block-size must be at least 1");
  ServingPlanReport report{.model = model_name, .profile = profile, .options = options};
  ServingPlanOptions& o = report.options;
  if (o.serving.max_model_len <= 0 || o.serving.max_model_len > model.max_position_embeddings) {
    o.serving.max_model_len = model.max_position_embeddings;
  }
  const std::vector<double> levels = o.rates.empty() ? std::vector<double>{0} : o.rates;
  for (int tp : o.tp) {
    if (Status fits = CheckTensorParallel(model, tp); !fits.ok()) {
      report.skipped.push_back(fmt::format("TP={}: {}", tp, fits.message()));
      continue;
    }
    auto kv_blocks = KvBlocksPerReplica(model, profile, o, tp);
    if (!kv_blocks.ok()) {
      report.skipped.push_back(kv_blocks.status().message());
      continue;
    }
    for (int replicas : o.replicas) {
      for (double rate : levels) {
        ASSIGN_OR_RETURN(ServingRun run, SimulateLevel(model, profile, requests, o, tp, replicas, *kv_blocks, rate));
        report.runs.push_back(std::move(run));
      }
    }
  }
  if (report.runs.empty()) return InvalidArgument("plan simulate: no TP degree in --tp can run this model here");
  report.recommendations = Recommend(report);
  return report;
}

std::string FormatServingPlan(const ServingPlanReport& r) {
  std::string out;
  const ServingPlanOptions& o = r.options;
  for (const ServingRun& run : r.runs) {
    const std::string title = fmt::format("tpserve plan simulate ({}, {})", ConfigName(run.tp, run.replicas),
                                          LevelName(run.rate, run.concurrency));
    const std::string target =
        fmt::format("{} on {}, simulated: {}, {} KV blocks of {} tokens per replica", r.model, r.profile.name,
                    Gpus(run.gpus), run.kv_blocks, o.block_size);
    out += FormatLoadReport(run.report, o.slo, title, target);
    out += fmt::format("{:<40} {:.3f}\n{:<40} {} ({:.1f} sequences each on average)\n", "Goodput per GPU (req/s):",
                       run.goodput_per_gpu, "Steps:", run.steps, run.mean_batch);
  }
  out += fmt::format("\n{} on {} ({}): predicted serving, {} requests per load level\n", r.model, r.profile.name,
                     r.profile.description, r.runs.front().report.sent);
  if (!r.profile.calibration.empty()) out += "calibration: " + r.profile.calibration + "\n";
  out += "  config               GPUs  load              req/s    tok/s  TTFT p50/p99 ms   TPOT p50/p99 ms  "
         "goodput  /GPU    within SLO\n";
  for (const ServingRun& run : r.runs) {
    const LoadReport& p = run.report;
    out += fmt::format("  {:<20} {:>4}  {:<16} {:>6.2f} {:>8.0f} {:>8.1f}/{:<8.1f} {:>7.2f}/{:<7.2f} {:>8.2f} {:>6.3f} {:>6.1f}%\n",
                       ConfigName(run.tp, run.replicas), run.gpus, LevelName(run.rate, run.concurrency),
                       p.request_throughput, p.output_token_throughput, p.ttft_ms.p50, p.ttft_ms.p99, p.tpot_ms.p50,
                       p.tpot_ms.p99, p.goodput, run.goodput_per_gpu, 100 * run.slo_attainment);
  }
  for (const std::string& skipped : r.skipped) out += "  skipped " + skipped + "\n";
  for (const ServingRecommendation& rec : r.recommendations) out += "  -> " + rec.reason + "\n";
  return out;
}

std::string ServingPlanJson(const ServingPlanReport& r) {
  nlohmann::json runs = nlohmann::json::array();
  for (const ServingRun& run : r.runs) {
    nlohmann::json row = {{"tp", run.tp},
                          {"replicas", run.replicas},
                          {"gpus", run.gpus},
                          {"rate", run.rate},
                          {"concurrency", run.concurrency},
                          {"kv_blocks_per_replica", run.kv_blocks},
                          {"steps", run.steps},
                          {"mean_batch", run.mean_batch},
                          {"goodput_per_gpu", run.goodput_per_gpu},
                          {"slo_attainment", run.slo_attainment}};
    row.update(LoadReportJson(run.report));
    runs.push_back(std::move(row));
  }
  nlohmann::json recs = nlohmann::json::array();
  for (const ServingRecommendation& rec : r.recommendations) {
    recs.push_back({{"rate", rec.rate}, {"concurrency", rec.concurrency}, {"tp", rec.tp}, {"replicas", rec.replicas},
                    {"meets_slo", rec.meets_slo}, {"reason", rec.reason}});
  }
  const ServingPlanOptions& o = r.options;
  nlohmann::json out = {
      {"model", r.model},
      {"hardware", r.profile.name},
      {"calibration", r.profile.calibration},
      {"slo", {{"ttft_ms", o.slo.ttft_ms}, {"tpot_ms", o.slo.tpot_ms}, {"attainment", o.slo_attainment}}},
      {"scheduler",
       {{"max_batch_size", o.serving.scheduler.max_batch_size},
        {"max_batched_tokens", o.serving.scheduler.max_batched_tokens},
        {"max_wait_us", o.serving.max_wait_us},
        {"max_queue", o.serving.max_queue},
        {"max_model_len", o.serving.max_model_len},
        {"block_size", o.block_size}}},
      {"runs", runs},
      {"skipped", r.skipped},
      {"recommendations", recs}};
  return out.dump();
}

LineChart ServingPlanChart(const ServingPlanReport& r) {
  LineChart chart;
  const bool open_loop = !r.options.rates.empty();
  chart.title = "goodput per GPU (" + r.model + " on " + r.profile.name + ", simulated)";
  chart.x_label = open_loop ? "offered load (requests/s)" : "concurrency (requests in flight)";
  chart.y_label = "goodput per GPU (requests/s)";
  for (const ServingRun& run : r.runs) {
    const std::string label = ConfigName(run.tp, run.replicas);
    auto series = std::find_if(chart.series.begin(), chart.series.end(),
                               [&](const ChartSeries& s) { return s.label == label; });
    if (series == chart.series.end()) {
      chart.series.push_back(ChartSeries{.label = label});
      series = chart.series.end() - 1;
    }
    series->points.emplace_back(open_loop ? run.rate : run.concurrency, run.goodput_per_gpu);
  }
  return chart;
}

}  // namespace tpserve::planner
