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
};

// Sizes from model/rank_weights' ShapeForRank, the engine's own split.
Shard ShardFor(const ModelConfig& c, int tp) {
  const RankShape shape = ShapeForRank(c, 0, tp);
  Shard s;
  const double h = c.hidden_size, q_local = static_cast<double>(shape.heads) * shape.head_dim;
  s.kv_width = static_cast<double>(shape.kv_heads) * shape.head_dim;
  s.layer_params = h * q_local + 2 * h * s.kv_width + q_local * h + 3 * h * shape.ffn;
  s.lm_head_params = static_cast<double>(shape.vocab) * h;
  s.embed_params = c.tie_word_embeddings ? 0 : s.lm_head_params;
  return s;
}

}  // namespace

double ComputeTerms::Gemm() const {
  return overlapped ? std::max(gemm_stream_ms, gemm_flops_ms) : gemm_stream_ms + gemm_flops_ms;
}
double ComputeTerms::LmHead() const {
  return overlapped ? std::max(lm_head_stream_ms, lm_head_flops_ms) : lm_head_stream_ms + lm_head_flops_ms;
}
double ComputeTerms::Total() const { return Gemm() + attention_ms + LmHead(); }

ComputeTerms ComputeTermsAt(const ModelConfig& c, const HardwareProfile& p, const EngineTraits& e,
                            const DecodePoint& point) {
  const Shard shard = ShardFor(c, point.tp);
  const double batch = point.batch, layers = c.num_layers;
  // Each device streams its own weights, except CPU ranks that share one memory (and its cores).
  const double share = p.shared_memory_bandwidth ? point.tp : 1;
  const double bandwidth = p.memory_bandwidth_gb_s * 1e9 * p.memory_efficiency / share;
  const double flops = (point.weight_bytes == 1 ? p.fp8_tflops : p.bf16_tflops) * 1e12 * p.compute_efficiency / share;
  ComputeTerms t;
  t.overlapped = p.compute_overlaps_memory;
  t.gemm_stream_ms = layers * shard.layer_params * point.weight_bytes / bandwidth * 1e3;
  t.gemm_flops_ms = layers * 2 * batch * shard.layer_params / flops * 1e3;
  t.attention_ms = layers * batch * point.context * 2 * shard.kv_width * e.kv_bytes /
                   (bandwidth / p.memory_efficiency * p.attention_efficiency) * 1e3;
  t.lm_head_stream_ms = shard.lm_head_params * point.weight_bytes / bandwidth * 1e3;
  t.lm_head_flops_ms = 2 * batch * shard.lm_head_params / flops * 1e3;
  return t;
}

Result<DecodePrediction> PredictDecodeStep(const ModelConfig& c, const HardwareProfile& p, const EngineTraits& e,
                                           const DecodePoint& point) {
  if (point.tp < 1 || point.batch < 1 || point.context < 1) {
    return InvalidArgument("tp, batch and context must be at least 1");
  }
  if (c.num_heads % point.tp != 0 || c.intermediate_size % point.tp != 0 ||
      (c.num_kv_heads % point.tp != 0 && point.tp % c.num_kv_heads != 0)) {
    return InvalidArgument("--tp " + std::to_string(point.tp) + " does not divide " + std::to_string(c.num_heads) +
                           " heads, " + std::to_string(c.num_kv_heads) + " KV heads and " +
                           std::to_string(c.intermediate_size) + " FFN features evenly");
  }
  if (point.weight_bytes == 1 && p.fp8_tflops <= 0) return InvalidArgument(p.name + " has no FP8 rate (--dtype fp8)");
  const Shard shard = ShardFor(c, point.tp);
  const double batch = point.batch, layers = c.num_layers;
  DecodePrediction out;
  out.point = point;
  const ComputeTerms terms = ComputeTermsAt(c, p, e, point);
  out.compute_bound_gemm = terms.gemm_flops_ms > terms.gemm_stream_ms;
  out.gemm_ms = terms.Gemm();
  out.attention_ms = terms.attention_ms;
  out.lm_head_ms = terms.LmHead();
  if (point.tp > 1) {
    out.allreduce_message_bytes = batch * c.hidden_size * e.allreduce_bytes;
    ASSIGN_OR_RETURN(out.allreduce,
                     EstimateCollective(p, Collective::kAllReduce, point.tp, out.allreduce_message_bytes));
    out.allreduce_ms = (2 * layers + 1) * out.allreduce.time_us * 1e-3;  // + the embedding's
    out.latency_bound_comm = out.allreduce.latency_bound();
    const double gathered = batch * std::ceil(static_cast<double>(c.vocab_size) / point.tp) * point.tp * e.logits_bytes;
    ASSIGN_OR_RETURN(CollectiveEstimate gather, EstimateCollective(p, Collective::kAllGather, point.tp, gathered));
    out.logits_ms = gather.time_us * 1e-3;
  }
  out.layer_overhead_ms = layers * p.layer_us * 1e-3;
  // Launches overlap the GPU's work; only what exceeds it shows.
  const double device_ms =
      out.gemm_ms + out.attention_ms + out.allreduce_ms + out.lm_head_ms + out.logits_ms + out.layer_overhead_ms;
  const double launch_ms = (layers * p.kernels_per_layer + 4) * p.kernel_launch_us * 1e-3;
  out.launch_ms = std::max(0.0, launch_ms - device_ms);
  out.host_ms = p.step_host_us * 1e-3;
  out.step_ms = device_ms + out.launch_ms + out.host_ms;
  out.tokens_per_s = batch / (out.step_ms * 1e-3);
  out.tokens_per_s_per_device = out.tokens_per_s / point.tp;
  out.comm_share = (out.allreduce_ms + out.logits_ms) / out.step_ms;

  // Memory per device.
  const double weight_bytes = (layers * shard.layer_params + shard.lm_head_params + shard.embed_params) *
                              point.weight_bytes;
  const double kv_per_sequence = point.context * layers * 2 * shard.kv_width * e.kv_bytes;
  // Live activations of one step (f32): residual, normed, q/k/v, attention, gate/up, logits.
  const double activation_per_sequence =
      4.0 * (3 * c.hidden_size + (c.q_size() + 2 * shard.kv_width) / point.tp + 2.0 * c.intermediate_size / point.tp +
             std::ceil(static_cast<double>(c.vocab_size) / point.tp) * point.tp);
  out.weights_gb = weight_bytes / 1e9;
  out.kv_gb = batch * kv_per_sequence / 1e9;
  out.activations_gb = batch * activation_per_sequence / 1e9;
  const double budget = p.memory_gb * 1e9 * e.memory_utilization * (p.shared_memory_bandwidth ? 1.0 / point.tp : 1.0);
  out.fits = weight_bytes + batch * (kv_per_sequence + activation_per_sequence) <= budget;
  out.max_batch = budget > weight_bytes
                      ? static_cast<int>(std::floor((budget - weight_bytes) / (kv_per_sequence + activation_per_sequence)))
                      : 0;
  return out;
}

}  // namespace tpserve::planner
