// The subcommands of the `tpserve` executable. Each Add*Command registers its flags on `app` and
// the action to run when it is chosen; actions return the process exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <optional>
#include <string>

#include "clients/workload.h"
#include "common/status.h"
#include "kernels/cpu/linear.h"
#include "engine/engine.h"
#include "engine/step/serving_core.h"
#include "model/model_directory.h"
#include "planner/engine_calibration.h"
#include "planner/hardware_profile.h"

namespace tpserve {

using CommandAction = std::function<int()>;

void AddMakeModelCommand(CLI::App& app, CommandAction* action);
void AddTokenizeCommand(CLI::App& app, CommandAction* action);
void AddInspectCommand(CLI::App& app, CommandAction* action);
void AddDevicesCommand(CLI::App& app, CommandAction* action);
void AddGenerateCommand(CLI::App& app, CommandAction* action);
void AddBenchDecodeCommand(CLI::App& app, CommandAction* action);
void AddBenchCommCommand(CLI::App& app, CommandAction* action);
void AddPlanCommand(CLI::App& app, CommandAction* action);
// `plan simulate`, under `plan`.
void AddPlanSimulateCommand(CLI::App* plan, CommandAction* action);

// What `plan` and `plan simulate` predict for: the model's shape, the machine, and the bytes per KV
// cache and AllReduce element (--activation-dtype; default f32 on a cpu profile, tpserve's CPU
// path, bf16 on GPUs). Logs "<command>: ..." and returns nullopt when the model or machine is bad.
struct PlanTarget {
  ModelConfig shape;
  planner::HardwareProfile profile;
  int activation_bytes = 2;
};
// `calibration`: --calibration default|none|FILE and --engine-mode graphs|eager
// (planner/engine_calibration.h).
std::optional<PlanTarget> ResolvePlanTarget(const char* command, const ModelSource& model, const std::string& hardware,
                                            const std::string& activation_dtype,
                                            const planner::CalibrationChoice& calibration);
// Registers --calibration and --engine-mode into `calibration` (plan and plan simulate).
void AddCalibrationFlags(CLI::App* cmd, planner::CalibrationChoice* calibration);
// --kv-cache-dtype auto|bf16|f32|fp8 (plan and plan simulate; planner::KvCacheBytes reads it).
void AddKvCacheDtypeFlag(CLI::App* cmd, std::string* kv_cache_dtype);
#if defined(TPSERVE_WITH_GRPC)
void AddServeCommand(CLI::App& app, CommandAction* action);
void AddClientCommand(CLI::App& app, CommandAction* action);
void AddHealthCommand(CLI::App& app, CommandAction* action);
void AddLoadgenCommand(CLI::App& app, CommandAction* action);
#endif

// --device, --tp, --threads, --block-size, --kv-cache-mb, --kv-cache-blocks, --kv-cache-dtype,
// --linear-kernel
void AddEngineFlags(CLI::App* cmd, EngineOptions* engine);

// loadgen's workload flags: --concurrency, --rate (a list), --burstiness, --requests,
// --prompt-tokens, --output-tokens, --dataset, --seed, --slo-ttft-ms, --slo-tpot-ms.
void AddWorkloadFlags(CLI::App* cmd, WorkloadOptions* workload);

// serve's scheduler flags: --max-model-len, --max-batch-size, --max-wait-us, --max-batched-tokens,
// --max-queue.
void AddSchedulerFlags(CLI::App* cmd, ServingOptions* serving);

// The multi-process group's flags: --nnodes, --node-rank, --rendezvous, --group-secret-file,
// --bind-address, --group-timeout-ms.
void AddGroupFlags(CLI::App* cmd, MembershipFlags* membership, std::string* bind_address, int* group_timeout_ms);

// --model and the dummy-weights flags (--load-format, --num-layers, --tokenizer, --weights-seed).
void AddModelFlags(CLI::App* cmd, ModelSource* model);

// --device auto|cpu|cuda (default auto), and its resolution: `cpu` as is; otherwise ChooseDevice
// with the real CUDA probe, logging auto's fallback.
void AddDeviceFlag(CLI::App* cmd, DeviceKind* device);
Result<DeviceKind> ResolveDevice(DeviceKind requested);
// Engine::Create after resolving the group membership (flags, then LeaderWorkerSet / torchrun
// variables) and the device.
Result<std::unique_ptr<Engine>> CreateEngineOnDevice(const ModelDirectory& model, EngineOptions options);

// A multi-process follower's whole life: the leader's steps until it shuts down. The exit code.
int RunFollowerUntilShutdown(const char* command, Engine& engine);

// A --kv-cache-dtype value of the engine (auto = f32, bf16); throws CLI::ValidationError naming the
// flag.
cpu::KvDtype KvCacheDtypeFlag(const std::string& name);

// A --linear-kernel value; throws CLI::ValidationError naming the flag when it is unknown or does
// not run on this CPU.
cpu::LinearKernel LinearKernelFlag(const std::string& name);

// --plot FILE for the benchmark commands: renders and writes the chart when FILE is given.
// Returns the exit code (1 after logging "<command>: --plot ..." when writing fails).
int WritePlotIfAsked(const std::string& command, const std::string& path,
                     const std::function<std::string()>& render_svg);

// TPSERVE_ASSETS, or the folder scripts/fetch_assets.sh fills in the source tree.
std::string DefaultAssetsDir();

}  // namespace tpserve
