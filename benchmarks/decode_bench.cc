#include "common/median.h"
#include "benchmarks/decode_bench.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "kernels/cpu/memory_bandwidth.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cuda_module.h"
#include "engine/cuda_backend.h"
#include "engine/engine.h"
#include "model/model_directory.h"

namespace tpserve {
namespace {

// Weight bytes a decode step streams on all ranks: every projection and the LM head; of the
// embedding only the looked-up rows (negligible) unless it doubles as the LM head.
double StreamedWeightBytes(const ModelConfig& c) {
  const double h = c.hidden_size, q = c.q_size(), kv = c.kv_size(), f = c.intermediate_size;
  const double per_layer = h * q + 2 * h * kv + q * h + 3 * h * f;
  return 2.0 * (per_layer * c.num_layers + static_cast<double>(c.vocab_size) * h);
}

struct Point {
  int batch, context;
};

// One engine per (kernel, KV dtype, tp), its KV cache sized for the largest batch × context of the
// sweep, reused for every point (a model's weights load once per TP degree, not once per point).
Result<std::unique_ptr<Engine>> CreateBenchEngine(const ModelDirectory& model, const DecodeBenchOptions& o,
                                                  cpu::LinearKernel kernel, cpu::KvDtype kv_dtype, int tp,
                                                  int threads) {
  EngineOptions engine_options{.device = o.device, .tp = tp, .threads = threads, .block_size = 16,
                               .share_gpu = o.share_gpu, .collective_timeout_ms = o.collective_timeout_ms,
                               .return_logits = false, .linear_kernel = kernel, .kv_cache_dtype = kv_dtype};
  engine_options.allreduce = o.allreduce;
  engine_options.allreduce_table = o.allreduce_table;
  if (o.cuda_graphs) {
    engine_options.cuda_graphs = true;
    engine_options.trace_every = 1 << 30;  // per-op events would keep every step eager
  }
  const int max_batch = *std::max_element(o.batch.begin(), o.batch.end());
  const int max_context = *std::max_element(o.context.begin(), o.context.end());
  const int max_prefill = o.prefill.empty() ? 0 : *std::max_element(o.prefill.begin(), o.prefill.end());
  const int max_positions = std::max(max_context + o.decode_steps + 1, max_prefill);
  auto blocks_for = [&](int positions) { return (positions + engine_options.block_size - 1) / engine_options.block_size; };
  engine_options.kv_cache_blocks = std::max(max_batch * blocks_for(max_context + o.decode_steps + 1),
                                            blocks_for(max_prefill));
  engine_options.max_step_tokens = o.max_step_tokens;
  engine_options.max_step_sequences = max_batch;
  engine_options.max_context = max_positions;
  return Engine::Create(model, engine_options);
}

// Per-step figures of a point's timed steps, from each step's trace (the slowest rank's ops).
struct StepSamples {
  std::vector<double> step_ms, compute_ms, comm_ms, host_ms, allreduce_us;
  std::map<std::string, std::vector<double>> op_ms;  // per op: one sum over the layers per step
  double allreduce_bytes = 0;

  void Add(const StepTrace& trace) {
    step_ms.push_back(trace.step_ns * 1e-6);
    host_ms.push_back(trace.HostNs() * 1e-6);
    if (!trace.per_op) return;  // a step replayed from a CUDA graph: its total only
    const RankTrace& slowest = trace.ranks[trace.SlowestRank()];
    compute_ms.push_back(slowest.ComputeNs() * 1e-6);
    comm_ms.push_back(slowest.CommNs() * 1e-6);
    std::map<std::string, double> step_ops;
    for (const OpRecord& op : slowest.ops) {
      step_ops[std::string(OpName(op.op))] += op.duration_ns * 1e-6;
      if (op.op == OpKind::kAllReduceAttn || op.op == OpKind::kAllReduceMlp) {
        allreduce_us.push_back(op.duration_ns * 1e-3);
        allreduce_bytes = static_cast<double>(op.bytes);
      }
    }
    for (const auto& [name, ms] : step_ops) op_ms[name].push_back(ms);
  }
  // A row's medians (DecodeBenchRow, PrefillBenchRow), `tokens` fed per step.
  template <typename Row>
  void SetMedians(int tokens, Row* row) const {
    row->step_ms = Median(step_ms);
    row->tokens_per_s = tokens / (row->step_ms * 1e-3);
    row->compute_ms = Median(compute_ms);
    row->comm_ms = Median(comm_ms);
    row->host_ms = Median(host_ms);
    for (const auto& [name, samples] : op_ms) row->op_ms[name] = Median(samples);
  }
};

// `paired`: a read of the step's weight bytes after each timed step (nullptr: none).
Result<DecodeBenchRow> MeasureOne(Engine& engine, const ModelDirectory& model, const DecodeBenchOptions& o,
                                  Point point, cpu::PairedRead* paired) {
  const auto [batch, context] = point;
  const int positions = context + o.decode_steps + 1;
  std::vector<SequencePlan> seqs(batch);
  for (int b = 0; b < batch; ++b) {
    seqs[b].sequence_id = b;
    for (int p = 0; p < positions; p += engine.block_size()) {
      seqs[b].block_table.push_back(*engine.block_pool().Allocate());
    }
    for (int t = 0; t < context; ++t) seqs[b].tokens.push_back((b * 7919 + t * 104729) % 100000);
    seqs[b].sampling = {.temperature = o.temperature, .seed = static_cast<uint64_t>(b)};
  }
  struct FreeBlocks {  // the next point reuses them
    Engine& engine;
    std::vector<SequencePlan>& seqs;
    ~FreeBlocks() {
      for (const auto& seq : seqs) {
        for (int32_t block : seq.block_table) engine.block_pool().Free(block);
      }
    }
  } free_blocks{engine, seqs};
  // Within the engine's step limit, as serve fills prompts (batch × context tokens can exceed it).
  const std::vector<StepPlan> prefill = ChunkedPrefill(seqs, engine.max_step_tokens(), 0);
  for (const StepPlan& plan : prefill) RETURN_IF_ERROR(engine.Step(plan).status());

  StepSamples samples;
  std::vector<double> read_ms, read_over_step;
  for (int step = 1; step <= o.decode_steps; ++step) {
    for (int b = 0; b < batch; ++b) {
      seqs[b].start_position += static_cast<int32_t>(seqs[b].tokens.size());
      seqs[b].tokens = {(b * 31 + step * 17) % 100000};  // fixed inputs: timing, not text
    }
    const int64_t step_id = static_cast<int64_t>(prefill.size()) + step - 1;
    const StepPlan plan{.step_id = step_id, .sequences = seqs};
    if (paired != nullptr) {
      // The read left the engine's threads asleep, which back-to-back decode steps never find
      // them: the same step once untimed first (it writes the same KV slots with the same values)
      // wakes them, so the timed step costs what a serving step does.
      RETURN_IF_ERROR(engine.Step(plan).status());
    }
    ASSIGN_OR_RETURN(StepResult result, engine.Step(plan));
    samples.Add(result.trace);
    if (paired != nullptr) {
      // The engine's pool spins for well under a millisecond after a step before it sleeps: wait
      // it out, so the read has the cores to itself (the next step then wakes its threads).
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      read_ms.push_back(paired->Seconds() * 1e3);
      read_over_step.push_back(read_ms.back() / samples.step_ms.back());
    }
  }
  DecodeBenchRow row;
  if (paired != nullptr) {
    row.paired_read_ms = Median(read_ms);
    row.fraction_of_paired_read = Median(read_over_step);
  }
  row.tp = engine.tp();
  row.batch = batch;
  row.context = context;
  samples.SetMedians(batch, &row);
  row.comm_share = row.comm_ms / std::max(1e-9, row.compute_ms + row.comm_ms);
  row.allreduce_bytes = samples.allreduce_bytes;
  row.allreduce_us = Median(samples.allreduce_us);
  row.weight_bytes = StreamedWeightBytes(model.config);
  return row;
}

// A `tokens`-token prompt of one sequence from position 0, in one step whose last token samples,
// `repeats` times on the same blocks (each run overwrites the KV the previous one wrote).
Result<PrefillBenchRow> MeasurePrefill(Engine& engine, const DecodeBenchOptions& o, int tokens, int64_t* step_id) {
  SequencePlan seq{.sequence_id = 0, .want_logits = true};
  for (int p = 0; p < tokens; p += engine.block_size()) seq.block_table.push_back(*engine.block_pool().Allocate());
  for (int t = 0; t < tokens; ++t) seq.tokens.push_back((t * 104729 + 17) % 100000);
  struct FreeBlocks {
    Engine& engine;
    SequencePlan& seq;
    ~FreeBlocks() {
      for (int32_t block : seq.block_table) engine.block_pool().Free(block);
    }
  } free_blocks{engine, seq};
  StepSamples samples;
  for (int repeat = 0; repeat < std::max(1, o.prefill_repeats); ++repeat) {
    ASSIGN_OR_RETURN(StepResult result, engine.Step(StepPlan{.step_id = (*step_id)++, .sequences = {seq}}));
    samples.Add(result.trace);
  }
  PrefillBenchRow row;
  row.tp = engine.tp();
  row.tokens = tokens;
  samples.SetMedians(tokens, &row);
  return row;
}

// "AMD EPYC 9654 96-Core Processor" (/proc/cpuinfo), or the first GPU's line of the CUDA probe.
std::string DeviceName(DeviceKind device) {
  if (device == DeviceKind::kCuda) {
    auto probe = ProbeCudaBackend();
    if (probe.ok()) return probe->report.substr(0, probe->report.find('\n'));
  }
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      return line.substr(line.find(':') + 2);
    }
  }
  return "unknown CPU";
}

// The weight-streaming ceiling: the CPU's DRAM read bandwidth with the same threads, or the GPU's
// with a read-only kernel (≥ 4 GiB, so no cache holds it).
Result<double> MeasureReadBandwidth(const ModelConfig& config, const DecodeBenchOptions& o, int threads) {
  const size_t twice_weights = static_cast<size_t>(2 * StreamedWeightBytes(config));
  if (o.device == DeviceKind::kCuda) {
    ASSIGN_OR_RETURN(CudaProbe probe, ProbeCudaBackend());
    return MeasureCudaReadBandwidth(probe.module_path, 0, std::max<size_t>(size_t{4} << 30, twice_weights));
  }
  cpu::ThreadPool pool(threads);
  return cpu::MeasureMemoryBandwidth(std::max<size_t>(size_t{1} << 30, twice_weights), 5, &pool).read_gb_per_s;
}

// Tokens/s over the batch-1 row of the same kernel, KV dtype, tp and context among `rows` (0: none).
double VsBatch1(const std::vector<DecodeBenchRow>& rows, const DecodeBenchRow& row) {
  double vs_batch1 = 0;
  for (const DecodeBenchRow& single : rows) {
    if (single.batch == 1 && single.kernel == row.kernel && single.kv_dtype == row.kv_dtype && single.tp == row.tp &&
        single.context == row.context) {
      vs_batch1 = row.tokens_per_s / single.tokens_per_s;
    }
  }
  return vs_batch1;
}

nlohmann::json RowJson(const DecodeBenchRow& row) {
  return {{"kernel", cpu::LinearKernelName(row.kernel)}, {"kv_cache_dtype", cpu::KvDtypeName(row.kv_dtype)},
          {"tp", row.tp}, {"batch", row.batch},
          {"context", row.context}, {"step_ms", row.step_ms},
          {"tokens_per_s", row.tokens_per_s}, {"vs_batch1", row.vs_batch1},
          {"compute_ms", row.compute_ms},
          {"comm_ms", row.comm_ms}, {"host_ms", row.host_ms},
          {"comm_share", row.comm_share}, {"allreduce_bytes", row.allreduce_bytes},
          {"allreduce_us", row.allreduce_us}, {"weight_bytes", row.weight_bytes},
          {"ceiling_tokens_per_s", row.ceiling_tokens_per_s},
          {"fraction_of_ceiling", row.fraction_of_ceiling},
          {"fraction_of_paired_read", row.fraction_of_paired_read}, {"paired_read_ms", row.paired_read_ms},
          {"op_ms", row.op_ms}};
}

nlohmann::json PrefillRowJson(const PrefillBenchRow& row) {
  return {{"kernel", cpu::LinearKernelName(row.kernel)}, {"kv_cache_dtype", cpu::KvDtypeName(row.kv_dtype)},
          {"tp", row.tp}, {"tokens", row.tokens},
          {"step_ms", row.step_ms}, {"tokens_per_s", row.tokens_per_s}, {"compute_ms", row.compute_ms},
          {"comm_ms", row.comm_ms}, {"host_ms", row.host_ms}, {"op_ms", row.op_ms}};
}

}  // namespace

std::vector<StepPlan> ChunkedPrefill(const std::vector<SequencePlan>& sequences, int max_step_tokens,
                                     int64_t first_step_id) {
  std::vector<StepPlan> steps;
  size_t next = 0;  // the sequence whose prompt is being fed
  size_t fed = 0;   // of its tokens
  while (next < sequences.size()) {
    StepPlan plan{.step_id = first_step_id + static_cast<int64_t>(steps.size())};
    int budget = std::max(1, max_step_tokens);
    while (next < sequences.size() && budget > 0) {
      const SequencePlan& seq = sequences[next];
      const size_t chunk = std::min<size_t>(budget, seq.tokens.size() - fed);
      SequencePlan part = seq;
      part.tokens.assign(seq.tokens.begin() + fed, seq.tokens.begin() + fed + chunk);
      part.start_position = seq.start_position + static_cast<int32_t>(fed);
      fed += chunk;
      part.want_logits = seq.want_logits && fed == seq.tokens.size();
      budget -= static_cast<int>(chunk);
      if (!part.tokens.empty()) plan.sequences.push_back(std::move(part));
      if (fed == seq.tokens.size()) {
        ++next;
        fed = 0;
      }
    }
    steps.push_back(std::move(plan));
  }
  return steps;
}

Result<DecodeBenchReport> RunDecodeBench(const DecodeBenchOptions& o, const DecodeBenchRowCallback& on_row) {
  if (o.batch.empty() || o.context.empty() || o.tp.empty()) return InvalidArgument("--tp, --batch and --context need values");
  for (int context : o.context) {
    if (context < 1) return InvalidArgument("--context values must be at least 1");
  }
  if (o.max_step_tokens < 1) return InvalidArgument("--max-step-tokens must be at least 1");
  for (int tokens : o.prefill) {
    if (tokens < 1 || tokens > o.max_step_tokens) {
      return InvalidArgument("--prefill " + std::to_string(tokens) + ": a prompt length must be 1 to --max-step-tokens (" +
                             std::to_string(o.max_step_tokens) + "), so that it is one step");
    }
  }
  ASSIGN_OR_RETURN(ModelDirectory model, OpenModel(o.model));
  DecodeBenchReport report;
  report.device = o.device;
  report.model = model.config;
  report.device_name = DeviceName(o.device);
  report.temperature = o.temperature;
  report.threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  ASSIGN_OR_RETURN(report.read_gb_per_s, MeasureReadBandwidth(model.config, o, report.threads));
  const std::vector<cpu::LinearKernel> kernels =
      o.device == DeviceKind::kCuda ? std::vector<cpu::LinearKernel>{o.kernels.front()} : o.kernels;
  // One engine set per (kernel, KV dtype), in the order given (CUDA: its f32 cache alone).
  std::vector<std::pair<cpu::LinearKernel, cpu::KvDtype>> engine_kinds;
  for (cpu::LinearKernel kernel : kernels) {
    for (cpu::KvDtype kv_dtype : o.device == DeviceKind::kCuda ? std::vector{cpu::KvDtype::kF32} : o.kv_dtypes) {
      engine_kinds.emplace_back(kernel, kv_dtype);
    }
  }
  std::unique_ptr<cpu::PairedRead> paired;
  if (o.device == DeviceKind::kCpu && o.paired_read) {
    paired = std::make_unique<cpu::PairedRead>(static_cast<size_t>(StreamedWeightBytes(model.config)),
                                               report.threads);
  }
  for (const auto& [kernel, kv_dtype] : engine_kinds) {
    for (int tp : o.tp) {
      ASSIGN_OR_RETURN(auto engine, CreateBenchEngine(model, o, kernel, kv_dtype, tp, report.threads));
      for (int batch : o.batch) {
        for (int context : o.context) {
          const Point point{batch, context};
          ASSIGN_OR_RETURN(DecodeBenchRow row, MeasureOne(*engine, model, o, point, paired.get()));
          row.kernel = kernel;
          row.kv_dtype = kv_dtype;
          row.ceiling_tokens_per_s = batch * report.read_gb_per_s * 1e9 / row.weight_bytes;
          row.fraction_of_ceiling = row.tokens_per_s / row.ceiling_tokens_per_s;
          if (o.trace_overhead && report.rows.empty()) {
            // Traced and untraced runs alternate three times each on the same engine, so drift in
            // machine load shows up on both sides; medians of the per-run medians.
            std::vector<double> traced = {row.step_ms}, untraced;
            for (int repeat = 0; repeat < 3; ++repeat) {
              engine->set_trace(false);
              ASSIGN_OR_RETURN(DecodeBenchRow off, MeasureOne(*engine, model, o, point, paired.get()));
              engine->set_trace(true);
              untraced.push_back(off.step_ms);
              if (repeat < 2) {
                ASSIGN_OR_RETURN(DecodeBenchRow on, MeasureOne(*engine, model, o, point, paired.get()));
                traced.push_back(on.step_ms);
              }
            }
            report.untraced_step_ms = Median(untraced);
            report.trace_overhead = Median(traced) / report.untraced_step_ms - 1;
          }
          report.rows.push_back(row);
          report.rows.back().vs_batch1 = VsBatch1(report.rows, report.rows.back());
          if (on_row) on_row(report, report.rows.back());
        }
      }
      int64_t step_id = 0;
      for (int tokens : o.prefill) {
        ASSIGN_OR_RETURN(PrefillBenchRow row, MeasurePrefill(*engine, o, tokens, &step_id));
        row.kernel = kernel;
        row.kv_dtype = kv_dtype;
        report.prefill_rows.push_back(std::move(row));
      }
    }
  }
  // A batch-1 row measured after the others (--batch 8,1) counts too.
  for (DecodeBenchRow& row : report.rows) row.vs_batch1 = VsBatch1(report.rows, row);
  return report;
}

std::string FormatDecodeBench(const DecodeBenchReport& r) {
  std::string out;
  char line[320];
  if (r.device == DeviceKind::kCuda) {
    std::snprintf(line, sizeof(line),
                  "device: cuda\nceiling: GPU memory read %.1f GB/s on cuda:0 (read-only kernel over >= 4 GiB, "
                  "measured in this run)\n",
                  r.read_gb_per_s);
  } else {
    std::snprintf(line, sizeof(line),
                  "device: %s\nceiling: DRAM read %.1f GB/s with %d threads (measured in this run)\n",
                  DeviceKindName(r.device), r.read_gb_per_s, r.threads);
  }
  out += line;
  if (r.untraced_step_ms > 0) {
    std::snprintf(line, sizeof(line),
                  "per-op tracing overhead (first point): %+.1f%% (untraced step %.2f ms)\n",
                  100 * r.trace_overhead, r.untraced_step_ms);
    out += line;
  }
  const bool paired = !r.rows.empty() && r.rows.front().fraction_of_paired_read > 0;
  if (paired) {
    out += "of-read: median over steps of (the step's weight bytes read right after it, same threads) / (the "
           "step)\n";
  }
  out += "  kernel   kv tp batch context   tok/s  vs_b1  ceiling  of-ceil";
  out += paired ? "  of-read" : "";
  out += "  step_ms  compute   comm   host  comm%  AR_bytes  AR_us\n";
  for (const auto& row : r.rows) {
    std::snprintf(line, sizeof(line), "  %6s %4s %2d %5d %7d %7.1f %5.2fx %8.1f %7.0f%%",
                  cpu::LinearKernelName(row.kernel), cpu::KvDtypeName(row.kv_dtype), row.tp, row.batch, row.context,
                  row.tokens_per_s, row.vs_batch1, row.ceiling_tokens_per_s, 100 * row.fraction_of_ceiling);
    out += line;
    if (paired) {
      std::snprintf(line, sizeof(line), " %7.0f%%", 100 * row.fraction_of_paired_read);
      out += line;
    }
    std::snprintf(line, sizeof(line), " %8.2f %8.2f %6.2f %6.2f %5.1f%% %9.0f %6.1f\n", row.step_ms,
                  row.compute_ms, row.comm_ms, row.host_ms, 100 * row.comm_share, row.allreduce_bytes,
                  row.allreduce_us);
    out += line;
  }
  if (!r.prefill_rows.empty()) {
    out += "prefill (one sequence from position 0, one step; median of repeats):\n";
    out += "  kernel   kv tp  tokens    tok/s  step_ms  compute   comm   host  gemm_ms  attn_ms\n";
    for (const auto& row : r.prefill_rows) {
      double gemm = 0;
      for (const char* op : {"qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head"}) {
        if (auto it = row.op_ms.find(op); it != row.op_ms.end()) gemm += it->second;
      }
      const auto attention = row.op_ms.find("attention");
      std::snprintf(line, sizeof(line), "  %6s %4s %2d %7d %8.1f %8.2f %8.2f %6.2f %6.2f %8.2f %8.2f\n",
                    cpu::LinearKernelName(row.kernel), cpu::KvDtypeName(row.kv_dtype), row.tp, row.tokens,
                    row.tokens_per_s, row.step_ms, row.compute_ms, row.comm_ms, row.host_ms, gemm,
                    attention == row.op_ms.end() ? 0.0 : attention->second);
      out += line;
    }
  }
  return out;
}

StackedBarChart DecodeBreakdownChart(const DecodeBenchReport& r) {
  StackedBarChart chart;
  chart.title = "decode step breakdown (slowest rank, median step)";
  const bool contexts = r.rows.size() > 1 && r.rows.front().context != r.rows.back().context;
  const bool kernels = r.rows.size() > 1 && r.rows.front().kernel != r.rows.back().kernel;
  const bool kv_dtypes = r.rows.size() > 1 && r.rows.front().kv_dtype != r.rows.back().kv_dtype;
  chart.x_label = std::string("tensor-parallel degree (tp), batch size (b)") + (contexts ? ", context (c)" : "") +
                  (kernels ? ", Linear kernel" : "") + (kv_dtypes ? ", KV cache dtype" : "");
  chart.y_label = "time per decode step (ms)";
  chart.parts = {"compute", "comm (collectives)", "host"};
  for (const auto& row : r.rows) {
    std::string label = "tp" + std::to_string(row.tp) + " b" + std::to_string(row.batch);
    if (contexts) label += "\nc" + std::to_string(row.context);
    if (kernels) label += "\n" + std::string(cpu::LinearKernelName(row.kernel));
    if (kv_dtypes) label += "\nkv " + std::string(cpu::KvDtypeName(row.kv_dtype));
    chart.categories.push_back(label);
    chart.values.push_back({row.compute_ms, row.comm_ms, row.host_ms});
  }
  return chart;
}

std::string DecodeBenchJson(const DecodeBenchReport& r) {
  const ModelConfig& m = r.model;
  nlohmann::json out = {{"device", DeviceKindName(r.device)},
                        {"device_name", r.device_name},
                        {"model",
                         {{"hidden_size", m.hidden_size},
                          {"intermediate_size", m.intermediate_size},
                          {"num_hidden_layers", m.num_layers},
                          {"num_attention_heads", m.num_heads},
                          {"num_key_value_heads", m.num_kv_heads},
                          {"head_dim", m.head_dim},
                          {"vocab_size", m.vocab_size},
                          {"tie_word_embeddings", m.tie_word_embeddings}}},
                        {"read_gb_per_s", r.read_gb_per_s},
                        {"threads", r.threads},
                        {"temperature", r.temperature},
                        {"untraced_step_ms", r.untraced_step_ms},
                        {"trace_overhead", r.trace_overhead},
                        {"rows", nlohmann::json::array()}};
  for (const auto& row : r.rows) out["rows"].push_back(RowJson(row));
  out["prefill_rows"] = nlohmann::json::array();
  for (const auto& row : r.prefill_rows) out["prefill_rows"].push_back(PrefillRowJson(row));
  return out.dump();
}

std::string DecodeBenchRowJson(const DecodeBenchReport& r, const DecodeBenchRow& row) {
  nlohmann::json out = RowJson(row);
  out["device"] = DeviceKindName(r.device);
  return out.dump();
}

}  // namespace tpserve
