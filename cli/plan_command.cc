#include <spdlog/spdlog.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/model_directory.h"
#include "model/model_maker.h"
#include "planner/calibrate.h"
#include "planner/engine_calibration.h"
#include "planner/plan.h"
#include "cli/commands.h"
#include "planner/engine_calibration.h"

namespace tpserve {
namespace {

struct PlanCommandOptions {
  ModelSource model;
  std::string hardware;
  planner::CalibrationChoice calibration;
  std::string dtype = "bf16";
  std::string activation_dtype;  // bf16 | f32; default: f32 on a cpu profile (tpserve's CPU path), bf16 on GPUs
  std::string kv_cache_dtype = "auto";
  double slo_tpot_ms = 0;
  bool json = false;
  std::string plot;
  planner::PlanOptions plan;
};

int RunPlanCommand(PlanCommandOptions& o) {
  const std::optional<PlanTarget> target =
      ResolvePlanTarget("plan", o.model, o.hardware, o.activation_dtype, o.calibration);
  if (!target) return 1;
  o.plan.engine.kv_bytes = planner::KvCacheBytes(o.kv_cache_dtype, target->activation_bytes);
  o.plan.engine.allreduce_bytes = target->activation_bytes;
  o.plan.weight_bytes = o.dtype == "fp8" ? 1 : 2;
  if (o.slo_tpot_ms > 0) o.plan.slo_tpot_ms = o.slo_tpot_ms;
  auto report = planner::RunPlan(target->shape, o.model.model, target->profile, o.plan);
  if (!report.ok()) {
    spdlog::error("plan: {}", report.status().message());
    return 1;
  }
  std::printf("%s\n", o.json ? planner::PlanJson(*report).c_str() : planner::FormatPlan(*report).c_str());
  return WritePlotIfAsked("plan", o.plot, [&] { return RenderSvg(planner::PlanChart(*report)); });
}

int RunCalibrateCommand(const planner::CalibrateInputs& inputs, const std::string& out_path) {
  auto calibration = planner::Calibrate(inputs);
  if (!calibration.ok()) {
    spdlog::error("plan calibrate: {}", calibration.status().message());
    return 1;
  }
  for (const std::string& note : calibration->notes) std::printf("%s\n", note.c_str());
  std::ofstream out(out_path);
  out << planner::HardwareProfileJson(calibration->profile).dump(2) << "\n";
  if (!out) {
    spdlog::error("plan calibrate: --out {}: cannot write", out_path);
    return 1;
  }
  std::printf("wrote %s (plan --hardware %s)\n", out_path.c_str(), out_path.c_str());
  return 0;
}

std::string Today() {
  const std::time_t now = std::time(nullptr);
  char date[16];
  std::strftime(date, sizeof(date), "%Y-%m-%d", std::gmtime(&now));
  return date;
}

}  // namespace

std::optional<PlanTarget> ResolvePlanTarget(const char* command, const ModelSource& model, const std::string& hardware,
                                            const std::string& activation_dtype,
                                            const planner::CalibrationChoice& calibration) {
  auto shape = ResolveModelShape(model);
  if (!shape.ok()) {
    spdlog::error("{}: --model: {}", command, shape.status().message());
    return std::nullopt;
  }
  auto profile = planner::LoadHardwareProfile(hardware);
  if (!profile.ok()) {
    spdlog::error("{}: {}", command, profile.status().message());
    return std::nullopt;
  }
  if (auto applied = planner::ApplyEngineCalibration(calibration, &*profile); !applied.ok()) {
    spdlog::error("{}: {}", command, applied.status().message());
    return std::nullopt;
  }
  const std::string activations =
      !activation_dtype.empty() ? activation_dtype : profile->device_kind == "cpu" ? "f32" : "bf16";
  return PlanTarget{*std::move(shape), *std::move(profile), activations == "f32" ? 4 : 2};
}

void AddCalibrationFlags(CLI::App* cmd, planner::CalibrationChoice* calibration) {
  cmd->add_option("--calibration", calibration->calibration,
                  "What engines achieve on a preset's GPU: default (fitted on published engine timings, "
                  "docs/PLANNER.md), none (the hardware's floor), or a file of the same form")
      ->capture_default_str();
  cmd->add_option("--engine-mode", calibration->engine_mode,
                  "How the engine issues its kernels: graphs (CUDA graphs or a C++ runtime: vLLM's and SGLang's "
                  "default, TensorRT-LLM, LMDeploy) or eager (one by one from its host loop: TGI before 1.4, vLLM "
                  "--enforce-eager; the calibration's host time per layer)")
      ->check(CLI::IsMember({"graphs", "eager"}))
      ->capture_default_str();
}

void AddKvCacheDtypeFlag(CLI::App* cmd, std::string* kv_cache_dtype) {
  cmd->add_option("--kv-cache-dtype", *kv_cache_dtype,
                  "KV cache elements: auto (the activation dtype), bf16, f32 or fp8 (vLLM's --kv-cache-dtype fp8, "
                  "TensorRT-LLM's FP8 KV cache): the cache's capacity and the bytes attention reads")
      ->check(CLI::IsMember({"auto", "bf16", "f32", "fp8"}))
      ->capture_default_str();
}

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
  cmd->add_option("--model", o->model.model, "Model directory, config.json, or a known model's name");
  cmd->add_option("--tokenizer", o->model.tokenizer, "Vocabulary of the presets tiny and small (llama3 | qwen2)")
      ->check(CLI::IsMember(TokenizerNames()))
      ->capture_default_str();
  cmd->add_option("--hardware", o->hardware, "A preset (" + names + ") or a profile file (plan calibrate)");
  AddCalibrationFlags(cmd, &o->calibration);
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
  AddKvCacheDtypeFlag(cmd, &o->kv_cache_dtype);
  cmd->add_option("--slo-tpot-ms", o->slo_tpot_ms, "Per-token latency bound for the recommendation")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--json", o->json, "Print one JSON object (schema: docs/API.md)");
  cmd->add_option("--plot", o->plot, "Write the stacked step-time chart (FILE.svg or FILE.png)");
  auto calibrate = std::make_shared<planner::CalibrateInputs>();
  auto out_path = std::make_shared<std::string>();
  CLI::App* cal = cmd->add_subcommand(
      "calibrate",
      "Write a hardware profile from measurements: bench-comm --json and nccl-tests output (alpha/beta\n"
      "per size range), bench-decode --json (achieved bandwidth, compute rate against the rows from its\n"
      "decode and --prefill steps, host time) or any engine's step times (--engine-steps).");
  cal->add_option("--bench-comm", calibrate->bench_comm, "bench-comm --json output (repeatable)")->check(CLI::ExistingFile);
  cal->add_option("--nccl-tests", calibrate->nccl_tests, "nccl-tests text output (repeatable)")->check(CLI::ExistingFile);
  cal->add_option("--bench-decode", calibrate->bench_decode, "bench-decode --json output (repeatable)")
      ->check(CLI::ExistingFile);
  cal->add_option("--engine-steps", calibrate->engine_steps,
                  "Step times of any engine, JSON points (docs/API.md): decode points fit its memory efficiency and "
                  "per-layer time on --base, prefill points (prompt_tokens, ttft_ms) its compute efficiency "
                  "(repeatable)")
      ->check(CLI::ExistingFile);
  cal->add_option("--base", calibrate->base, "Preset or profile to start from (default: a CPU profile of this machine)");
  cal->add_option("--out", *out_path, "Profile file to write")->required();
  cal->callback([calibrate, out_path, action] {
    calibrate->date = Today();
    *action = [calibrate, out_path] { return RunCalibrateCommand(*calibrate, *out_path); };
  });
  AddPlanSimulateCommand(cmd, action);
  cmd->callback([cmd, cal, o, action] {
    if (cmd->got_subcommand(cal) || cmd->got_subcommand("simulate")) return;
    if (o->model.model.empty() || o->hardware.empty()) {
      throw CLI::ValidationError("plan", "needs --model and --hardware (or the calibrate or simulate subcommand)");
    }
    *action = [o] { return RunPlanCommand(*o); };
  });
}

}  // namespace tpserve
