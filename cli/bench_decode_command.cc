#include <spdlog/spdlog.h>

#include <cstdio>

#include "benchmarks/decode_bench.h"
#include "cli/commands.h"

namespace tpserve {

void AddBenchDecodeCommand(CLI::App& app, CommandAction* action) {
  auto options = std::make_shared<DecodeBenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench-decode",
      "Decode throughput per TP degree, batch size and context length with the compute / comm /\n"
      "host breakdown, next to the weight-streaming ceiling (DRAM read bandwidth measured in the\n"
      "same run).");
  AddModelFlags(cmd, &options->model);
  cmd->add_option("--tp", options->tp, "TP degrees, e.g. 1,2")->delimiter(',')->capture_default_str();
  cmd->add_option("--batch", options->batch, "Batch sizes, e.g. 1,8,32")->delimiter(',')->capture_default_str();
  cmd->add_option("--context", options->context, "Context lengths (tokens in the KV cache), e.g. 32,512,2048")
      ->delimiter(',')->capture_default_str();
  cmd->add_option("--steps", options->decode_steps, "Decode steps per point (median reported)")->capture_default_str();
  cmd->add_option(
         "--temperature", options->temperature,
         "Decode rows' sampling temperature: 0 greedy (at TP 1 the CPU's AVX-512 BF16 LM head then "
         "finds the tokens itself, and a GPU samples them), above it drawn on the host from the "
         "logits")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--max-step-tokens", options->max_step_tokens,
                  "The engine's step limit (serve's --max-batched-tokens): the contexts are filled in prefill "
                  "steps of at most this many tokens")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--prefill", options->prefill,
                  "Also time prefill steps of these prompt lengths (one sequence from position 0, one step each, "
                  "at most --max-step-tokens), e.g. 64,256,512: what plan calibrate fits prefill on")
      ->delimiter(',');
  cmd->add_option("--prefill-repeats", options->prefill_repeats, "Runs per prompt length (median reported)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--threads", options->threads, "Compute threads in all (0: every core)")->capture_default_str();
  AddDeviceFlag(cmd, &options->device);
  cmd->add_flag("--share-gpu", options->share_gpu,
                "CUDA, for testing: every rank on the first visible GPU (rank-order communicator)");
  cmd->add_option("--allreduce", options->allreduce, "CUDA, TP > 1: nccl | oneshot | auto, as serve's")
      ->check(CLI::IsMember({"nccl", "oneshot", "auto"}))
      ->capture_default_str();
  cmd->add_option("--allreduce-table", options->allreduce_table, "For --allreduce auto, as serve's");
  cmd->add_option_function<std::string>(
         "--cuda-graphs", [options](const std::string& on) { options->cuda_graphs = on == "on"; },
         "CUDA: replay the decode steps from CUDA graphs (step totals only: per-op timing keeps a step eager)")
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option("--collective-timeout-ms", options->collective_timeout_ms,
                  "The engine's collective timeout, as serve's (0: none, to measure what the timeouts cost)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option_function<std::vector<std::string>>(
         "--linear-kernel",
         [options](const std::vector<std::string>& names) {
           options->kernels.clear();
           for (const std::string& name : names) options->kernels.push_back(LinearKernelFlag(name));
         },
         "Linear kernels to compare in one run, e.g. amx,avx512 (default: the fastest on this CPU)")
      ->delimiter(',');
  cmd->add_option_function<std::vector<std::string>>(
         "--kv-cache-dtype",
         [options](const std::vector<std::string>& names) {
           options->kv_dtypes.clear();
           for (const std::string& name : names)
             options->kv_dtypes.push_back(KvCacheDtypeFlag(name));
         },
         "CPU: KV cache element types to compare in one run, e.g. f32,bf16 (as serve's "
         "--kv-cache-dtype; default f32)")
      ->delimiter(',');
  cmd->add_flag("--paired-read,!--no-paired-read", options->paired_read,
                "CPU: after each timed step, read its weight bytes with the same threads (the of-read column: "
                "the ceiling in the same moment; each timed step then runs once untimed first, to wake the threads "
                "the read left asleep); --no-paired-read times the steps back to back")
      ->capture_default_str();
  cmd->add_flag("--json", options->json, "Print one JSON object (schema: docs/API.md)");
  cmd->add_flag("--jsonl", options->jsonl,
                "Also print each row on stderr as soon as it is measured: one JSON object per line, the keys "
                "of --json's rows plus \"device\"");
  cmd->add_option("--plot", options->plot, "Write the stacked compute/comm/host chart (FILE.svg or FILE.png)");
  cmd->callback([options, action] {
    *action = [options] {
      auto device = ResolveDevice(options->device);
      if (!device.ok()) {
        spdlog::error("bench-decode: {}", device.status().message());
        return 1;
      }
      options->device = *device;
      DecodeBenchRowCallback on_row;
      if (options->jsonl) {
        on_row = [](const DecodeBenchReport& report, const DecodeBenchRow& row) {
          std::fprintf(stderr, "%s\n", DecodeBenchRowJson(report, row).c_str());
          std::fflush(stderr);
        };
      }
      auto report = RunDecodeBench(*options, on_row);
      if (!report.ok()) {
        spdlog::error("bench-decode: {}", report.status().ToString());
        return 1;
      }
      std::printf("%s\n", options->json ? DecodeBenchJson(*report).c_str() : FormatDecodeBench(*report).c_str());
      return WritePlotIfAsked("bench-decode", options->plot,
                              [&] { return RenderSvg(DecodeBreakdownChart(*report)); });
    };
  });
}

}  // namespace tpserve
