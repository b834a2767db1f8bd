// `tpserve bench-decode`: decode throughput over TP degree × batch size × context length, with each step's
// compute / comm / host breakdown, next to the weight-streaming ceiling measured in the same run
// (weight bytes read per step / DRAM read bandwidth with the same threads).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "benchmarks/svg_chart.h"
#include "common/status.h"
#include "engine/step/step_plan.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/ops.h"
#include "kernels/device_choice.h"
#include "model/model_config.h"
#include "model/model_directory.h"

namespace tpserve {

struct DecodeBenchOptions {
  ModelSource model;
  std::vector<int> tp = {1, 2};
  std::vector<int> batch = {1, 8, 32};
  std::vector<int> context = {32};  // tokens already in the KV cache when decoding starts
  int decode_steps = 32;
  // Every decode row's sampling temperature (a seed per sequence). 0: greedy, whose rows the CPU's
  // AVX-512 BF16 LM head answers with tokens at TP 1 (cpu::GreedyLinear) and the CUDA backend
  // samples on the GPU; above kGreedyTemperature every row is drawn on the host from the logits.
  float temperature = 0.0f;
  // Prompt lengths to time as prefill steps of one sequence from position 0 (each at most
  // max_step_tokens, so that it is one step): the GEMMs at many rows and prefill attention, what
  // `plan calibrate` fits the compute rate's rise with the row count and attention's FLOP rate on.
  std::vector<int> prefill;
  int prefill_repeats = 5;  // per prompt length (median reported)
  // The engine's step limit (EngineOptions::max_step_tokens): the contexts are filled in prefill
  // steps of at most this many tokens in all, as serve's scheduler fills prompts.
  int max_step_tokens = 8192;
  int threads = 0;  // 0: every core
  DeviceKind device = DeviceKind::kCpu;  // resolved (never auto)
  bool share_gpu = false;                // CUDA: every rank on GPU 0 (TP > 1 on a one-GPU machine)
  std::string allreduce = "nccl";        // CUDA: --allreduce nccl|oneshot|auto, as serve's
  std::string allreduce_table;
  // CUDA: decode steps replay CUDA graphs; only the engine's first step is timed per op, so the
  // breakdown columns then come from eager steps alone and the step time from the graphs.
  bool cuda_graphs = false;
  int collective_timeout_ms = 60000;     // the engine's (0: no timeouts; the safety-net benchmark)
  std::vector<cpu::LinearKernel> kernels = {cpu::BestLinearKernel()};  // compared in one run
  std::vector<cpu::KvDtype> kv_dtypes = {cpu::KvDtype::kF32};          // CPU: compared in one run
  bool json = false;
  bool jsonl = false;          // also each row as one JSON line on stderr as soon as it is measured
  std::string plot;            // --plot FILE.svg|png
  bool trace_overhead = true;  // also time the first point with per-op tracing off
  // CPU: after each timed step, a pause (the engine's threads go idle) and one read of the step's
  // weight bytes with the same threads: the ceiling in the same moment as the step it bounds. Each
  // timed step then runs once untimed first, so that it finds the threads awake, as back-to-back
  // decode steps do (on a 2-vCPU VM the two wake-ups cost 0.1-0.15 ms of a 7 ms step).
  bool paired_read = true;
};

struct DecodeBenchRow {
  cpu::LinearKernel kernel = cpu::LinearKernel::kAvx512;
  cpu::KvDtype kv_dtype = cpu::KvDtype::kF32;
  int tp = 0;
  int batch = 0;
  int context = 0;               // tokens in each sequence's KV cache before the timed steps
  double step_ms = 0;            // median decode step (engine wall time)
  double tokens_per_s = 0;       // batch / step
  double compute_ms = 0;         // slowest rank, median
  double comm_ms = 0;
  double host_ms = 0;
  double comm_share = 0;         // comm / rank forward time
  double allreduce_bytes = 0;    // per AllReduce message
  double allreduce_us = 0;       // median AllReduce latency
  double weight_bytes = 0;       // read per step, all ranks
  double ceiling_tokens_per_s = 0;  // batch * bandwidth / weight_bytes
  double fraction_of_ceiling = 0;
  // CPU with paired_read: median over the timed steps of (a read of weight_bytes with the same
  // threads right after the step) / (the step); the read's median (ms). 0: not measured.
  double fraction_of_paired_read = 0;
  double paired_read_ms = 0;
  double vs_batch1 =
      0;  // tokens/s over the batch-1 row of the same kernel, KV dtype, tp and context (0: none)
  // Per op (OpName), the slowest rank's time in that op summed over the layers of a step; median
  // over steps (ms). What the planner's terms are compared with.
  std::map<std::string, double> op_ms;
};

// One prefill step: a `tokens`-token prompt from position 0, its last token sampling.
struct PrefillBenchRow {
  cpu::LinearKernel kernel = cpu::LinearKernel::kAvx512;
  cpu::KvDtype kv_dtype = cpu::KvDtype::kF32;
  int tp = 0;
  int tokens = 0;
  double step_ms = 0;      // median (engine wall time)
  double tokens_per_s = 0;  // tokens / step
  double compute_ms = 0;   // slowest rank, median
  double comm_ms = 0;
  double host_ms = 0;
  std::map<std::string, double> op_ms;  // per op, slowest rank, all layers; median over repeats
};

struct DecodeBenchReport {
  DeviceKind device = DeviceKind::kCpu;
  std::string device_name;  // the CPU's model name, or the GPU's
  ModelConfig model;        // the shape that was measured
  double read_gb_per_s = 0;
  int threads = 0;
  float temperature = 0.0f;     // the decode rows' (DecodeBenchOptions::temperature)
  double untraced_step_ms = 0;  // first point, per-op tracing off (0 when not measured)
  double trace_overhead = 0;    // traced / untraced step time - 1, first point
  std::vector<DecodeBenchRow> rows;
  std::vector<PrefillBenchRow> prefill_rows;
};

// Called with each row as soon as it is measured (its vs_batch1 against the rows measured before
// it), and with the report so far (device, model, ceiling).
using DecodeBenchRowCallback = std::function<void(const DecodeBenchReport& report, const DecodeBenchRow& row)>;

Result<DecodeBenchReport> RunDecodeBench(const DecodeBenchOptions& options, const DecodeBenchRowCallback& on_row = {});
std::string FormatDecodeBench(const DecodeBenchReport& report);
std::string DecodeBenchJson(const DecodeBenchReport& report);
// One row as DecodeBenchJson writes it in "rows", plus the report's "device": a line of --jsonl.
std::string DecodeBenchRowJson(const DecodeBenchReport& report, const DecodeBenchRow& row);

// The prefill steps that feed each sequence's `tokens` from its start_position, in plan order, with
// at most max_step_tokens tokens per step in all: as the server's scheduler does, a step may hold
// the end of one prompt and the start of the next, and only a prompt's last chunk keeps the
// sequence's want_logits. Step ids count up from first_step_id.
std::vector<StepPlan> ChunkedPrefill(const std::vector<SequencePlan>& sequences, int max_step_tokens,
                                     int64_t first_step_id);
// Stacked compute / comm / host milliseconds per decode step, one bar per (tp, batch).
StackedBarChart DecodeBreakdownChart(const DecodeBenchReport& report);

}  // namespace tpserve
