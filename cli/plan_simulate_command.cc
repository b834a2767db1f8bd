// `tpserve plan simulate`: loadgen's workload, run through the server's own serving loop on a
// simulated clock at each TP degree and replica count, each step timed by the planner's step
// model; reported as loadgen reports a real run, with goodput per GPU and a recommendation.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <optional>

#include "model/model_directory.h"
#include "model/model_maker.h"
#include "planner/serving_plan.h"
#include "cli/commands.h"

namespace tpserve {
namespace {

struct SimulateCommandOptions {
  ModelSource model;
  std::string hardware;
  planner::CalibrationChoice calibration;
  std::string dtype = "bf16";
  std::string activation_dtype;  // bf16 | f32; default: f32 on a cpu profile, bf16 on GPUs
  std::string kv_cache_dtype = "auto";
  WorkloadOptions workload;
  planner::ServingPlanOptions plan;
  bool json = false;
  std::string plot;
};

// The workload, request for request what loadgen sends: random prompts' ids (shared prefixes
// included), a dataset's prompts as the model's tokenizer encodes them.
Result<std::vector<SimulatedRequest>> WorkloadLengths(const SimulateCommandOptions& o, int vocab) {
  ASSIGN_OR_RETURN(const Workload workload, Workload::FromOptions(o.workload, vocab));
  std::optional<Tokenizer> tokenizer;
  if (!workload.dataset.empty()) {
    ASSIGN_OR_RETURN(const std::string dir, ResolveTokenizerDir(o.model));
    ASSIGN_OR_RETURN(tokenizer, LoadTokenizer(dir));
  }
  std::vector<SimulatedRequest> requests;
  requests.reserve(o.workload.requests);
  for (int i = 0; i < o.workload.requests; ++i) {
    LoadRequest request = workload.Make(i);
    if (tokenizer) {
      ASSIGN_OR_RETURN(request.prompt_ids, tokenizer->Encode(request.prompt_text, true));
      if (request.prompt_ids.empty()) request.prompt_ids = {0};
    }
    const int prompt_tokens = static_cast<int>(request.prompt_ids.size());
    requests.push_back(
        {.prompt_tokens = prompt_tokens, .output_tokens = request.output_tokens, .prompt = std::make_shared<const std::vector<int32_t>>(std::move(request.prompt_ids))});
  }
  return requests;
}

int RunSimulateCommand(SimulateCommandOptions& o) {
  const std::optional<PlanTarget> target =
      ResolvePlanTarget("plan simulate", o.model, o.hardware, o.activation_dtype, o.calibration);
  if (!target) return 1;
  auto requests = WorkloadLengths(o, target->shape.vocab_size);
  if (!requests.ok()) {
    spdlog::error("plan simulate: {}", requests.status().message());
    return 1;
  }
  o.plan.engine.kv_bytes = planner::KvCacheBytes(o.kv_cache_dtype, target->activation_bytes);
  o.plan.engine.allreduce_bytes = target->activation_bytes;
  o.plan.weight_bytes = o.dtype == "fp8" ? 1 : 2;
  o.plan.rates = o.workload.rates;
  o.plan.concurrency = o.workload.concurrency;
  o.plan.burstiness = o.workload.burstiness;
  o.plan.seed = o.workload.seed;
  o.plan.slo = o.workload.slo;
  auto report = planner::RunServingPlan(target->shape, o.model.model, target->profile, *requests, o.plan);
  if (!report.ok()) {
    spdlog::error("{}", report.status().message());
    return 1;
  }
  std::printf("%s\n", o.json ? planner::ServingPlanJson(*report).c_str() : planner::FormatServingPlan(*report).c_str());
  return WritePlotIfAsked("plan simulate", o.plot, [&] { return RenderSvg(planner::ServingPlanChart(*report)); });
}

}  // namespace

void AddPlanSimulateCommand(CLI::App* plan, CommandAction* action) {
  auto o = std::make_shared<SimulateCommandOptions>();
  o->model.assets_dir = DefaultAssetsDir();
  CLI::App* cmd = plan->add_subcommand(
      "simulate",
      "Predict what loadgen would measure against serve, per TP degree and replica count: the same\n"
      "workload flags, the server's own scheduler and admission rules on a simulated clock, each step\n"
      "timed by the planner's step model. Reports TTFT / TPOT / ITL / E2E, throughput and goodput per\n"
      "GPU, and recommends the configuration with the most goodput per GPU that keeps the SLOs.");
  std::string names;
  for (const std::string& n : planner::HardwareProfileNames()) names += (names.empty() ? "" : ", ") + n;
  cmd->add_option("--model", o->model.model, "Model directory, config.json, or a known model's name (its shape)")
      ->required();
  cmd->add_option("--tokenizer", o->model.tokenizer, "Vocabulary of the presets tiny and small (llama3 | qwen2)")
      ->check(CLI::IsMember(TokenizerNames()))
      ->capture_default_str();
  cmd->add_option("--hardware", o->hardware, "A preset (" + names + ") or a profile file (plan calibrate)")
      ->required();
  AddCalibrationFlags(cmd, &o->calibration);
  cmd->add_option("--tp", o->plan.tp, "TP degrees")->delimiter(',')->capture_default_str();
  cmd->add_option("--replicas", o->plan.replicas, "Replica counts (requests split round-robin)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--dtype", o->dtype, "Weights: bf16 or fp8")->check(CLI::IsMember({"bf16", "fp8"}))->capture_default_str();
  cmd->add_option("--activation-dtype", o->activation_dtype,
                  "KV cache and AllReduce elements: bf16 or f32 (default: f32 for a cpu profile, bf16 for GPUs)")
      ->check(CLI::IsMember({"bf16", "f32"}));
  AddKvCacheDtypeFlag(cmd, &o->kv_cache_dtype);
  AddWorkloadFlags(cmd, &o->workload);
  cmd->add_option("--slo-attainment", o->plan.slo_attainment,
                  "A configuration meets the SLOs when this share of its requests does")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  AddSchedulerFlags(cmd, &o->plan.serving);
  cmd->add_option("--block-size", o->plan.block_size, "Tokens per KV-cache block")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--kv-cache-blocks", o->plan.kv_cache_blocks, "KV blocks per replica, exactly (as serve's flag)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--kv-cache-mb", o->plan.kv_cache_mb,
                  "KV cache per replica, all ranks together, as the CPU engine takes it (default: what the "
                  "profile's memory holds beside the weights; a cpu profile: 256, serve's default)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--json", o->json, "Print one JSON object (schema: docs/API.md)");
  cmd->add_option("--plot", o->plot, "Write goodput per GPU against the load, one line per configuration (FILE.svg or FILE.png)");
  cmd->callback([o, action] { *action = [o] { return RunSimulateCommand(*o); }; });
}

}  // namespace tpserve
