#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/generator.h"
#include "model/known_models.h"
#include "model/model_maker.h"
#include "model/model_directory.h"
#include "text/tokenizer/incremental_decoder.h"
#include "engine/step/trace_report.h"
#include "cli/commands.h"

namespace tpserve {
namespace {

struct GenerateOptions {
  ModelSource model;
  std::string prompt;
  int max_tokens = 32;
  int batch = 1;
  bool json = false;
  bool profile = false;
  std::string trace_file;
  EngineOptions engine;
  GenerationOptions generation;
  SamplingParams sampling;
};

nlohmann::json LogprobsJson(const std::vector<SampledToken>& tokens) {
  nlohmann::json out = nlohmann::json::array();
  for (const SampledToken& t : tokens) {
    nlohmann::json top = nlohmann::json::array();
    for (const TokenLogprob& alt : t.top) top.push_back({{"id", alt.id}, {"logprob", alt.logprob}});
    out.push_back({{"id", t.id}, {"logprob", t.logprob}, {"top", top}});
  }
  return out;
}

int Run(const GenerateOptions& options) {
  auto model = OpenModel(options.model);
  if (!model.ok()) {
    spdlog::error("generate: {}", model.status().ToString());
    return 1;
  }
  auto prompt = EncodePrompt(*model, options.prompt);
  if (!prompt.ok()) {
    spdlog::error("generate: --prompt: {}", prompt.status().message());
    return 1;
  }
  // The Generator's steps: at most --max-batched-tokens tokens, every copy of the prompt, and the
  // prompt and its tokens (the Generator refuses more than the model's context by name).
  EngineOptions engine_options = options.engine;
  engine_options.max_step_tokens = options.generation.max_batched_tokens;
  engine_options.max_step_sequences = options.batch;
  engine_options.max_context =
      static_cast<int>(std::min<int64_t>(static_cast<int64_t>(prompt->size()) + options.max_tokens,
                                         model->config.max_position_embeddings));
  auto engine = CreateEngineOnDevice(*model, engine_options);
  if (!engine.ok()) {
    spdlog::error("generate: {}", engine.status().ToString());
    return 1;
  }
  if ((*engine)->follower()) return RunFollowerUntilShutdown("generate", **engine);
  spdlog::info("generate: {} on tp={} ({} threads per rank), {} prompt tokens, batch {}",
               model->config.architecture_name, options.engine.tp, (*engine)->threads_per_rank(),
               prompt->size(), options.batch);

  std::vector<GenerationRequest> requests(options.batch);
  for (int i = 0; i < options.batch; ++i) {
    requests[i] = {*prompt, options.max_tokens, options.sampling};
    requests[i].sampling.seed = options.sampling.seed + i;
  }
  // Stream request 0's text as it is generated (never a broken UTF-8 sequence).
  IncrementalDecoder stream(model->tokenizer, /*skip_special=*/true);
  TokenCallback on_token = [&](size_t request, const SampledToken& token) {
    if (options.json || request != 0) return;
    auto text = stream.Push(token.id);
    if (text.ok()) std::fputs(text->c_str(), stdout);
    std::fflush(stdout);
  };
  if (!options.json) std::printf("%s", options.prompt.c_str());
  std::vector<StepTrace> traces;
  Generator generator(engine->get());
  auto outputs = generator.Run(requests, options.generation, on_token, &traces);
  if (!outputs.ok()) {
    spdlog::error("generate: {}", outputs.status().ToString());
    return 1;
  }
  if (!options.json) std::printf("%s\n", stream.Finish().c_str());

  const TraceSummary summary = Summarize(traces);
  if (!options.trace_file.empty()) {
    Status written = WriteChromeTrace(traces, options.trace_file);
    if (!written.ok()) spdlog::error("generate: {}", written.message());
  }
  if (options.json) {
    nlohmann::json out = {{"model", model->path}, {"tp", options.engine.tp},
                          {"threads_per_rank", (*engine)->threads_per_rank()},
                          {"batch", options.batch}, {"prompt_token_ids", *prompt}};
    for (const GenerationOutput& o : *outputs) {
      std::vector<int32_t> ids;
      for (const auto& t : o.tokens) ids.push_back(t.id);
      nlohmann::json entry = {{"token_ids", ids},
                              {"text", model->tokenizer.Decode(ids, true).value()},
                              {"finish_reason", o.finish_reason}};
      if (options.sampling.logprobs > 0) entry["logprobs"] = LogprobsJson(o.tokens);
      out["outputs"].push_back(entry);
    }
    out["timing"] = {{"steps", summary.steps},
                     {"prefill_s", summary.prefill_s},
                     {"prefill_tokens", summary.prefill_tokens},
                     {"cached_tokens", summary.cached_tokens},
                     {"decode_s", summary.decode_s},
                     {"decode_tokens", summary.decode_tokens},
                     {"decode_tokens_per_s", summary.decode_tokens_per_s},
                     {"mean_decode_step_ms", summary.mean_decode_step_ms},
                     {"comm_share", summary.comm_share},
                     {"host_share", summary.host_share}};
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::fprintf(stderr, "[%lld decode tokens in %.2f s: %.1f tokens/s; prefill %.3f s]\n",
                 static_cast<long long>(summary.decode_tokens), summary.decode_s,
                 summary.decode_tokens_per_s, summary.prefill_s);
  }
  if (options.profile) std::fprintf(stderr, "%s", FormatProfile(traces).c_str());
  return 0;
}

}  // namespace

cpu::KvDtype KvCacheDtypeFlag(const std::string& name) {
  if (name == "auto") return cpu::KvDtype::kF32;  // the activations' type
  auto dtype = cpu::ParseKvDtype(name);
  if (!dtype.ok())
    throw CLI::ValidationError("--kv-cache-dtype", "'" + name + "' is not one of: auto, f32, bf16");
  return *dtype;
}

cpu::LinearKernel LinearKernelFlag(const std::string& name) {
  auto kernel = cpu::ParseLinearKernel(name);
  if (!kernel.ok()) throw CLI::ValidationError("--linear-kernel", kernel.status().message());
  return *kernel;
}

Result<DeviceKind> ResolveDevice(DeviceKind requested) {
  if (requested == DeviceKind::kCpu) return DeviceKind::kCpu;  // no probe, no CUDA runtime
  ASSIGN_OR_RETURN(DeviceChoice choice, ChooseDevice(requested, ProbeCudaBackend()));
  if (!choice.note.empty()) spdlog::info("{}", choice.note);
  return choice.kind;
}

Result<std::unique_ptr<Engine>> CreateEngineOnDevice(const ModelDirectory& model, EngineOptions options) {
  MembershipFlags flags = options.membership;
  if (options.tp != 1) flags.tp = options.tp;  // else: one rank per member
  ASSIGN_OR_RETURN(options.group, ResolveMembership(flags, MembershipEnvironment()));
  if (options.group.distributed()) {
    spdlog::info("multi-process TP from {}: member {} of {}{}, ranks {}..{} of {}", options.group.source,
                 options.group.member, options.group.members, options.group.leader() ? " (leader)" : "",
                 options.group.first_rank, options.group.first_rank + options.group.local_ranks - 1, options.group.tp);
    options.tp = options.group.tp;
    if (options.device == DeviceKind::kAuto) options.device = DeviceKind::kCpu;  // the CPU path spans processes
  }
  ASSIGN_OR_RETURN(options.device, ResolveDevice(options.device));
  return Engine::Create(model, options);
}

int RunFollowerUntilShutdown(const char* command, Engine& engine) {
  spdlog::info("{}: following the leader's steps", command);
  const Status status = engine.RunFollower();
  if (!status.ok()) {
    spdlog::error("{}: the group failed: {}", command, status.ToString());
    return 1;
  }
  spdlog::info("{}: the leader shut down", command);
  return 0;
}

void AddModelFlags(CLI::App* cmd, ModelSource* model) {
  model->assets_dir = DefaultAssetsDir();
  cmd->add_option("--model", model->model,
                  "Model directory; with --load-format dummy also a config.json or a known model's name (" +
                      [] {
                        std::string names;
                        for (const std::string& n : KnownModelNames()) names += (names.empty() ? "" : ", ") + n;
                        return names;
                      }() + ")")
      ->required();
  cmd->add_option("--load-format", model->load_format,
                  "auto: the checkpoint's safetensors; dummy: random weights of the model's shape, no checkpoint")
      ->check(CLI::IsMember({"auto", "dummy"}))
      ->capture_default_str();
  cmd->add_option("--num-layers", model->num_layers, "dummy: layers to build (0: the model's)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--tokenizer", model->tokenizer,
                  "dummy: bundled tokenizer when none is beside the config (llama3 | qwen2)")
      ->check(CLI::IsMember(TokenizerNames()))
      ->capture_default_str();
  cmd->add_option("--weights-seed", model->seed, "dummy: seed of the weights (make-model's --seed)")
      ->capture_default_str();
}

void AddDeviceFlag(CLI::App* cmd, DeviceKind* device) {
  *device = DeviceKind::kAuto;
  cmd->add_option_function<std::string>(
         "--device",
         [device](const std::string& name) {
           auto kind = ParseDeviceKind(name);
           if (!kind) throw CLI::ValidationError("--device", "'" + name + "' is not one of: auto, cpu, cuda");
           *device = *kind;
         },
         "Backend of the ranks: auto (CUDA when a GPU and the CUDA decoder are there, else the CPU, "
         "with one log line), cpu, or cuda (an error when CUDA cannot run). Default: auto");
}

void AddEngineFlags(CLI::App* cmd, EngineOptions* engine) {
  engine->return_logits = false;  // the commands use the sampled tokens only
  AddDeviceFlag(cmd, &engine->device);
  cmd->add_option("--tp", engine->tp, "Tensor-parallel degree (ranks, all processes together)")->capture_default_str();
  AddGroupFlags(cmd, &engine->membership, &engine->bind_address, &engine->group_timeout_ms);
  cmd->add_option("--threads", engine->threads,
                  "Compute threads in all, shared out among ranks (0: every core)")
      ->capture_default_str();
  cmd->add_option("--block-size", engine->block_size, "Tokens per KV-cache block")->capture_default_str();
  cmd->add_option("--trace-every", engine->trace_every,
                  "Time every op of every Nth step only (the step trace's other steps keep their totals)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--kv-cache-mb", engine->kv_cache_mb,
                  "KV cache size in MiB, all ranks (default: 256 on the CPU; on CUDA what "
                  "--gpu-memory-utilization leaves)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--kv-cache-blocks", engine->kv_cache_blocks,
                  "Exact number of KV blocks (overrides --kv-cache-mb)");
  cmd->add_option_function<std::string>(
      "--kv-cache-dtype",
      [engine](const std::string& name) { engine->kv_cache_dtype = KvCacheDtypeFlag(name); },
      "CPU: the KV cache's elements, f32 (auto: the activations', as the CUDA backend keeps them) "
      "or bf16 (half the memory, so twice the positions in --kv-cache-mb, and half the reads of a "
      "long context's attention; each element rounded to bf16). Default: f32");
  cmd->add_option("--gpu-memory-utilization", engine->gpu_memory_utilization,
                  "CUDA: share of each GPU's memory for weights, buffers and KV cache (vLLM's name)")
      ->check(CLI::Range(0.01, 1.0))
      ->capture_default_str();
  cmd->add_flag("--share-gpu", engine->share_gpu,
                "CUDA, for testing: every rank on the first visible GPU, summed by the rank-order "
                "communicator (TP > 1 on a one-GPU machine)");
  cmd->add_option("--allreduce", engine->allreduce,
                  "CUDA, TP > 1: nccl; oneshot (each rank reads its peers' buffers and sums in rank order, "
                  "fused with the residual add and RMSNorm: bitwise batch-invariant; needs peer access, else "
                  "NCCL with one log line); auto (one-shot below the size where NCCL wins in --allreduce-table)")
      ->check(CLI::IsMember({"nccl", "oneshot", "auto"}))
      ->capture_default_str();
  cmd->add_option("--allreduce-table", engine->allreduce_table,
                  "For --allreduce auto: the table bench-comm --backend oneshot --allreduce-table FILE wrote on "
                  "this machine (without one, auto is nccl)");
  cmd->add_option_function<std::string>(
         "--cuda-graphs", [engine](const std::string& on) { engine->cuda_graphs = on == "on"; },
         "CUDA: replay decode steps from CUDA graphs, one per batch-size bucket (padded up to it), captured on "
         "first use; steps timed per op (--trace-every) run eagerly (default off until the device check has "
         "recorded graphs equal to eager)")
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option("--cuda-graph-max-batch", engine->cuda_graph_max_batch,
                  "CUDA graphs: the largest decode batch captured (larger ones run eagerly)")
      ->check(CLI::Range(1, 8192))
      ->capture_default_str();
  cmd->add_option("--collective-timeout-ms", engine->collective_timeout_ms,
                  "A rank that waits this long for its peers in a collective (CPU) or for a step (CUDA) "
                  "fails the engine: requests get UNAVAILABLE, health NOT_SERVING (0: wait forever)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  // Fault injection for tests (hidden from --help): engine/step/fault_injection.h.
  cmd->add_option_function<std::string>(
         "--debug-fault",
         [engine](const std::string& spec) {
           auto fault = FaultInjection::Parse(spec);
           if (!fault.ok()) throw CLI::ValidationError("--debug-fault", fault.status().message());
           engine->fault = *fault;
         })
      ->group("");
  cmd->add_option_function<std::string>(
         "--linear-kernel",
         [engine](const std::string& name) { engine->linear_kernel = LinearKernelFlag(name); },
         std::string("CPU kernel of every projection: amx, avx512bf16, avx512, avx2 or portable (default: ") +
             cpu::LinearKernelName(engine->linear_kernel) + ", the fastest on this CPU)");
}

void AddGenerateCommand(CLI::App& app, CommandAction* action) {
  auto options = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "generate",
      "Run prefill + decode offline on the tensor-parallel engine and print the text as it is\n"
      "generated; --profile prints where each decode step's time went, --json one JSON object.");
  AddModelFlags(cmd, &options->model);
  cmd->add_option("--prompt", options->prompt, "Prompt text")->required();
  cmd->add_option("--max-tokens", options->max_tokens, "Tokens to generate")->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--batch", options->batch, "Copies of the prompt decoded together")
      ->capture_default_str()->check(CLI::PositiveNumber);
  AddEngineFlags(cmd, &options->engine);
  cmd->add_option("--max-batched-tokens", options->generation.max_batched_tokens,
                  "Token budget per step (long prompts are prefilled in chunks)")->capture_default_str();
  cmd->add_option_function<std::string>(
         "--prefix-caching",
         [options](const std::string& on) { options->generation.prefix_caching = on == "on"; },
         "--batch copies prefill their prompt's full blocks once and share them (outputs unchanged)")
      ->check(CLI::IsMember({"on", "off"}))
      ->default_str("on");
  cmd->add_option("--temperature", options->sampling.temperature, "0: greedy")->capture_default_str();
  cmd->add_option("--top-k", options->sampling.top_k, "0: off")->capture_default_str();
  cmd->add_option("--top-p", options->sampling.top_p, "Nucleus mass in (0, 1]")->capture_default_str();
  cmd->add_option("--seed", options->sampling.seed, "Sampling seed (request i uses seed + i)")
      ->capture_default_str();
  cmd->add_option("--min-tokens", options->sampling.min_tokens, "No eos/stop before this many tokens");
  cmd->add_flag("--ignore-eos", options->sampling.ignore_eos, "Always generate --max-tokens tokens");
  cmd->add_option("--logprobs", options->sampling.logprobs,
                  "Report each token's log-probability and the top-N alternatives (raw logits)");
  cmd->add_flag("--json", options->json, "Print one JSON object (schema: docs/API.md)");
  cmd->add_flag("--profile", options->profile, "Print the per-op latency breakdown of decode steps");
  cmd->add_option("--trace-file", options->trace_file,
                  "Write a Chrome/Perfetto trace (one track per rank) to this file");
  cmd->callback([options, action] { *action = [options] { return Run(*options); }; });
}

}  // namespace tpserve
