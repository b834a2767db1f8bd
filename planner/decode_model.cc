#include "planner/decode_model.h"

#include <algorithm>
#include <cmath>

#include "engine/step/rank_weights.h"

namespace tpserve::planner {
namespace {

// One device's share of the model (Megatron-style, as model/weight_layout.h splits it).
struct Shard {
  double layer_params = 0;  // q/k/v, o, gate/up, down
  double lm_head_params = 0;
  double embed_params = 0;
  double kv_width = 0;      // KV heads on this device × head_dim (KV heads replicate when fewer than tp)
  double q_width = 0;       // query heads on this device × head_dim
  double ffn_width = 0;     // FFN features on this device
};

// Sizes from model/rank_weights' ShapeForRank, the engine's own split.
Shard ShardFor(const ModelConfig& c, int tp) {
  const RankShape shape = ShapeForRank(c, 0, tp);
  Shard s;
  const double h = c.hidden_size, q_local = static_cast<double>(shape.heads) * shape.head_dim;
  s.kv_width = static_cast<double>(shape.kv_heads) * shape.head_dim;
  s.q_width = q_local;
  s.ffn_width = shape.ffn;
  s.layer_params = h * q_local + 2 * h * s.kv_width + q_local * h + 3 * h * shape.ffn;
  s.lm_head_params = static_cast<double>(shape.vocab) * h;
  s.embed_params = c.tie_word_embeddings ? 0 : s.lm_head_params;
  return s;
}

// What one device holds (bytes): its weight shard, the KV cache per position of one sequence, and
// the live activations (f32) of one row of a step: residual, normed, q/k/v, attention, gate/up,
// logits. `budget` is what the profile lets them use.
struct DeviceMemory {
  double budget = 0, weights = 0, kv_per_position = 0, activations_per_row = 0;
};

DeviceMemory DeviceMemoryFor(const ModelConfig& c, const HardwareProfile& p, const EngineTraits& e, int tp,
                             int weight_bytes) {
  const Shard shard = ShardFor(c, tp);
  const double layers = c.num_layers;
  DeviceMemory m;
  m.weights = (layers * shard.layer_params + shard.lm_head_params + shard.embed_params) * weight_bytes;
  m.kv_per_position = KvBytesPerPosition(c, e, tp);
  m.activations_per_row = 4.0 * (3 * c.hidden_size + (c.q_size() + 2 * shard.kv_width) / tp +
                                 2.0 * c.intermediate_size / tp + std::ceil(static_cast<double>(c.vocab_size) / tp) * tp);
  // CPU ranks share one memory.
  m.budget = p.memory_gb * 1e9 * e.memory_utilization * (p.shared_memory_bandwidth ? 1.0 / tp : 1.0);
  return m;
}

// A decode step: every sequence feeds one token, samples one, and attends to `context` positions.
StepShape DecodeShape(const DecodePoint& point) {
  return {.tp = point.tp, .tokens = point.batch, .logit_rows = point.batch,
          .attention_positions = static_cast<double>(point.batch) * point.context, .weight_bytes = point.weight_bytes};
}

}  // namespace

double ComputeTerms::Gemm() const {
  return overlapped ? std::max(gemm_stream_ms, gemm_flops_ms) : gemm_stream_ms + gemm_flops_ms;
}
double ComputeTerms::Attention() const { return std::max(attention_ms, attention_flops_ms); }
double ComputeTerms::LmHead() const {
  return overlapped ? std::max(lm_head_stream_ms, lm_head_flops_ms) : lm_head_stream_ms + lm_head_flops_ms;
}
double ComputeTerms::Total() const { return Gemm() + Attention() + elementwise_ms + LmHead(); }

ComputeTerms ComputeTermsFor(const ModelConfig& c, const HardwareProfile& p, const EngineTraits& e,
                             const StepShape& step) {
  const Shard shard = ShardFor(c, step.tp);
  const double layers = c.num_layers;
  // Each device streams its own weights, except CPU ranks that share one memory (and its cores).
  const double share = p.shared_memory_bandwidth ? step.tp : 1;
  const double bandwidth = p.memory_bandwidth_gb_s * 1e9 * p.memory_efficiency / share;
  const double flops = (step.weight_bytes == 1 ? p.fp8_tflops : p.bf16_tflops) * 1e12 * p.compute_efficiency / share;
  // The GEMM rate at `rows` rows (HardwareProfile::compute_half_rows).
  auto flops_at = [&](double rows) { return rows > 0 ? flops * rows / (rows + p.compute_half_rows) : flops; };
  const double attention_flops = (step.weight_bytes == 1 ? p.fp8_tflops : p.bf16_tflops) * 1e12 *
                                 (p.attention_compute_efficiency > 0 ? p.attention_compute_efficiency
                                                                     : p.compute_efficiency) /
                                 share;
  const double read_positions =
      step.attention_read_positions >= 0 ? step.attention_read_positions : step.attention_positions;
  ComputeTerms t;
  t.overlapped = p.compute_overlaps_memory;
  t.gemm_stream_ms = layers * shard.layer_params * step.weight_bytes / bandwidth * 1e3;
  t.gemm_flops_ms = layers * 2 * step.tokens * shard.layer_params / flops_at(step.tokens) * 1e3;
  t.attention_ms = layers * read_positions * 2 * shard.kv_width * e.kv_bytes /
                   (bandwidth / p.memory_efficiency * p.attention_efficiency) * 1e3;
  // QKᵀ and PV: 2 FLOPs per multiply-add, over this device's query heads.
  t.attention_flops_ms = layers * step.attention_positions * 4 * shard.q_width / attention_flops * 1e3;
  // The memory-bound ops between the GEMMs, each reading its inputs and writing its outputs once
  // (fused as vLLM's and TensorRT-LLM's kernels fuse them), per token: two residual adds with their
  // RMSNorms (read x and the residual, write both: 4 hidden-wide rows each, on every rank), RoPE on
  // this rank's q and k (read and write) and SiLU(gate) × up (read two FFN rows, write one).
  const double elementwise_elements =
      8.0 * c.hidden_size + 2 * (shard.q_width + shard.kv_width) + 3.0 * shard.ffn_width;
  t.elementwise_ms = layers * step.tokens * elementwise_elements * e.allreduce_bytes / bandwidth * 1e3;
  t.lm_head_stream_ms = step.logit_rows > 0 ? shard.lm_head_params * step.weight_bytes / bandwidth * 1e3 : 0;
  t.lm_head_flops_ms = 2 * step.logit_rows * shard.lm_head_params / flops_at(step.logit_rows) * 1e3;
  return t;
}

ComputeTerms ComputeTermsAt(const ModelConfig& c, const HardwareProfile& p, const EngineTraits& e,
                            const DecodePoint& point) {
  return ComputeTermsFor(c, p, e, DecodeShape(point));
}

Result<StepTime> PredictStepTime(const ModelConfig& c, const HardwareProfile& p, const EngineTraits& e,
                                 const StepShape& step) {
  if (step.tp < 1 || step.tokens < 1 || step.logit_rows < 0 || step.logit_rows > step.tokens ||
      step.attention_positions < step.tokens) {
    return InvalidArgument("a step needs tp >= 1, tokens >= 1, 0 <= logit rows <= tokens and at least one attended "
                           "position per token");
  }
  if (c.num_heads % step.tp != 0 || c.intermediate_size % step.tp != 0 ||
      (c.num_kv_heads % step.tp != 0 && step.tp % c.num_kv_heads != 0)) {
    return InvalidArgument("--tp " + std::to_string(step.tp) + " does not divide " + std::to_string(c.num_heads) +
                           " heads, " + std::to_string(c.num_kv_heads) + " KV heads and " +
                           std::to_string(c.intermediate_size) + " FFN features evenly");
  }
  if (step.weight_bytes == 1 && p.fp8_tflops <= 0) return InvalidArgument(p.name + " has no FP8 rate (--dtype fp8)");
  const double layers = c.num_layers;
  StepTime out;
  const ComputeTerms terms = ComputeTermsFor(c, p, e, step);
  out.compute_bound_gemm = terms.gemm_flops_ms > terms.gemm_stream_ms;
  out.gemm_ms = terms.Gemm();
  out.elementwise_ms = terms.elementwise_ms;
  out.attention_ms = terms.Attention();
  out.lm_head_ms = terms.LmHead();
  if (step.tp > 1) {
    out.allreduce_message_bytes = static_cast<double>(step.tokens) * c.hidden_size * e.allreduce_bytes;
    ASSIGN_OR_RETURN(out.allreduce,
                     EstimateCollective(p, Collective::kAllReduce, step.tp, out.allreduce_message_bytes));
    out.allreduce_ms = (2 * layers + 1) * out.allreduce.time_us * 1e-3;  // + the embedding's
    if (step.logit_rows > 0) {
      const double gathered = step.logit_rows * std::ceil(static_cast<double>(c.vocab_size) / step.tp) * step.tp *
                              e.logits_bytes;
      ASSIGN_OR_RETURN(CollectiveEstimate gather, EstimateCollective(p, Collective::kAllGather, step.tp, gathered));
      out.logits_ms = gather.time_us * 1e-3;
    }
  }
  out.layer_overhead_ms = layers * p.layer_us * 1e-3;
  // Launches (and an eager engine's host loop) overlap the GPU's work; only what exceeds it shows.
  const double device_ms = out.gemm_ms + out.attention_ms + out.elementwise_ms + out.allreduce_ms + out.lm_head_ms +
                           out.logits_ms + out.layer_overhead_ms;
  const double launch_ms =
      std::max((layers * p.kernels_per_layer + 4) * p.kernel_launch_us, layers * p.layer_host_us) * 1e-3;
  out.launch_ms = std::max(0.0, launch_ms - device_ms);
  out.host_ms = p.step_host_us * 1e-3;
  out.step_ms = device_ms + out.launch_ms + out.host_ms;
  return out;
}

Result<DecodePrediction> PredictDecodeStep(const ModelConfig& c, const HardwareProfile& p, const EngineTraits& e,
                                           const DecodePoint& point) {
  if (point.tp < 1 || point.batch < 1 || point.context < 1) {
    return InvalidArgument("tp, batch and context must be at least 1");
  }
  ASSIGN_OR_RETURN(const StepTime time, PredictStepTime(c, p, e, DecodeShape(point)));
  const double batch = point.batch;
  DecodePrediction out;
  out.point = point;
  out.compute_bound_gemm = time.compute_bound_gemm;
  out.gemm_ms = time.gemm_ms;
  out.attention_ms = time.attention_ms;
  out.lm_head_ms = time.lm_head_ms;
  out.allreduce_message_bytes = time.allreduce_message_bytes;
  out.allreduce = time.allreduce;
  out.allreduce_ms = time.allreduce_ms;
  out.latency_bound_comm = point.tp > 1 && time.allreduce.latency_bound();
  out.logits_ms = time.logits_ms;
  out.elementwise_ms = time.elementwise_ms;
  out.layer_overhead_ms = time.layer_overhead_ms;
  out.launch_ms = time.launch_ms;
  out.host_ms = time.host_ms;
  out.step_ms = time.step_ms;
  out.tokens_per_s = batch / (out.step_ms * 1e-3);
  out.tokens_per_s_per_device = out.tokens_per_s / point.tp;
  out.comm_share = (out.allreduce_ms + out.logits_ms) / out.step_ms;

  // Memory per device.
  const DeviceMemory memory = DeviceMemoryFor(c, p, e, point.tp, point.weight_bytes);
  const double kv_per_sequence = point.context * memory.kv_per_position;
  const double activation_per_sequence = memory.activations_per_row;
  out.weights_gb = memory.weights / 1e9;
  out.kv_gb = batch * kv_per_sequence / 1e9;
  out.activations_gb = batch * activation_per_sequence / 1e9;
  out.fits = memory.weights + batch * (kv_per_sequence + activation_per_sequence) <= memory.budget;
  out.max_batch = memory.budget > memory.weights
                      ? static_cast<int>(std::floor((memory.budget - memory.weights) /
                                                    (kv_per_sequence + activation_per_sequence)))
                      : 0;
  return out;
}

int KvCacheBytes(std::string_view kv_cache_dtype, int activation_bytes) {
  if (kv_cache_dtype == "fp8") return 1;
  if (kv_cache_dtype == "bf16") return 2;
  if (kv_cache_dtype == "f32") return 4;
  return activation_bytes;
}

double KvBytesPerPosition(const ModelConfig& c, const EngineTraits& e, int tp) {
  return c.num_layers * 2 * ShardFor(c, tp).kv_width * e.kv_bytes;
}

double KvCapacityPositions(const ModelConfig& c, const HardwareProfile& p, const EngineTraits& e, int tp,
                           int weight_bytes, int step_rows) {
  const DeviceMemory m = DeviceMemoryFor(c, p, e, tp, weight_bytes);
  const double left = m.budget - m.weights - step_rows * m.activations_per_row;
  return left > 0 ? std::floor(left / m.kv_per_position) : 0;
}

}  // namespace tpserve::planner
