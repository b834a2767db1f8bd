#include <spdlog/spdlog.h>

#include <cstdio>

#include "model/model_directory.h"
#include "model/model_maker.h"
#include "planner/plan.h"
#include "server/commands/commands.h"

namespace tpserve {
namespace {

struct PlanCommandOptions {
  ModelSource model;
  std::string hardware;
  std::string dtype = "bf16";
  std::string activation_dtype;  // bf16 | f32; default: f32 on a cpu profile (tpserve's CPU path), bf16 on GPUs
  double slo_tpot_ms = 0;
  bool json = false;
  std::string plot;
  planner::PlanOptions plan;
};

int RunPlanCommand(PlanCommandOptions& o) {
  auto shape = ResolveModelShape(o.model);
  if (!shape.ok()) {
    spdlog::error("plan: --model: {}", shape.status().message());
    return 1;
  }
  auto profile = planner::LoadHardwareProfile(o.hardware);
  if (!profile.ok()) {
    spdlog::error("plan: {}", profile.status().message());
    return 1;
  }
  const std::string activations =
      !o.activation_dtype.empty() ? o.activation_dtype : profile->device_kind == "cpu" ? "f32" : "bf16";
  const int activation_bytes = activations == "f32" ? 4 : 2;
  o.plan.engine.kv_bytes = activation_bytes;
  o.plan.engine.allreduce_bytes = activation_bytes;
  o.plan.weight_bytes = o.dtype == "fp8" ? 1 : 2;
  if (o.slo_tpot_ms > 0) o.plan.slo_tpot_ms = o.slo_tpot_ms;
  auto report = planner::RunPlan(*shape, o.model.model, *profile, o.plan);
  if (!report.ok()) {
    spdlog::error("plan: {}", report.status().message());
    return 1;
  }
  std::printf("%s\n", o.json ? planner::PlanJson(*report).c_str() : planner::FormatPlan(*report).c_str());
  return WritePlotIfAsked("plan", o.plot, [&] { return RenderSvg(planner::PlanChart(*report)); });
}

}  // namespace

void AddPlanCommand(CLI::App& app, CommandAction* action) {
  auto o = std::make_shared<PlanCommandOptions>();
  o->model.assets_dir = DefaultAssetsDir();
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "Predict decode latency and throughput per TP degree on a machine, term by term (GEMMs,\n"
      "attention, AllReduce through NCCL's tuning model, LM head, logits gather, launch, host),\n"
      "with memory fit and recommendations. No GPU needed.");
  std::string names;
  for (const std::string& n : planner::HardwareProfileNames()) names += (names.empty() ? "" : ", ") + n;
  cmd->add_option("--model", o->model.model, "Model directory, config.json, or a known model's name")->required();
  cmd->add_option("--tokenizer", o->model.tokenizer, "Vocabulary of the presets tiny and small (llama3 | qwen2)")
      ->check(CLI::IsMember(TokenizerNames()))
      ->capture_default_str();
  cmd->add_option("--hardware", o->hardware, "A preset (" + names + ") or a profile file (plan calibrate)")
      ->required();
  cmd->add_option("--tp", o->plan.tp, "TP degrees")->delimiter(',')->capture_default_str();
  cmd->add_option("--batch", o->plan.batch, "Batch sizes (sequences decoding together)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--context", o->plan.context, "Context lengths (tokens each sequence attends to)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--dtype", o->dtype, "Weights: bf16 or fp8")->check(CLI::IsMember({"bf16", "fp8"}))->capture_default_str();
  cmd->add_option("--activation-dtype", o->activation_dtype,
                  "KV cache and AllReduce elements: bf16 or f32 (default: f32 for a cpu profile, tpserve's CPU "
                  "backend; bf16 for GPUs)")
      ->check(CLI::IsMember({"bf16", "f32"}));
  cmd->add_option("--slo-tpot-ms", o->slo_tpot_ms, "Per-token latency bound for the recommendation")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--json", o->json, "Print one JSON object (schema: docs/API.md)");
  cmd->add_option("--plot", o->plot, "Write the stacked step-time chart (FILE.svg or FILE.png)");
  cmd->callback([o, action] { *action = [o] { return RunPlanCommand(*o); }; });
}

}  // namespace tpserve
