// The predicted decode step of a Llama-family model sharded over `tp` devices, term by term, in
// the same parts the engine's step trace measures: per layer the GEMMs (the larger of streaming
// the rank's weight slice and its FLOPs), attention (reading the KV cache), and the two
// AllReduces (through the collective model), the memory-bound elementwise ops between the GEMMs,
// and a fixed overhead per layer (gaps between kernels); then the LM head, the logits AllGather,
// exposed kernel-launch time (with an eager engine's host loop, what the GPU waits for it) and
// per-step host time. Also
// what one device holds (weights, KV cache, activations) and the largest batch that fits at this
// context.
#pragma once

#include <string_view>

#include "model/model_config.h"
#include "planner/collective_model.h"
#include "planner/hardware_profile.h"

namespace tpserve::planner {

struct DecodePoint {
  int tp = 1;
  int batch = 1;
  int context = 512;     // tokens each sequence attends to
  int weight_bytes = 2;  // per parameter: 2 bf16, 1 fp8
};

// What the engine the prediction is for moves per element (tpserve's CPU path: f32 KV and
// AllReduce; GPU engines: bf16).
struct EngineTraits {
  int kv_bytes = 2;         // per KV cache element
  int allreduce_bytes = 2;  // per element of the AllReduce message
  int logits_bytes = 4;     // per element of the gathered logits
  double memory_utilization = 0.9;  // of device memory for weights + KV + activations
};

// Bytes of one KV cache element of a dtype named as `plan --kv-cache-dtype` and bench-decode's rows
// name it: fp8 1, bf16 2, f32 4; anything else (auto, or a row that names none) the activations'.
int KvCacheBytes(std::string_view kv_cache_dtype, int activation_bytes);

struct DecodePrediction {
  DecodePoint point;
  // Parts of one decode step (ms), summing to step_ms.
  double gemm_ms = 0, attention_ms = 0, allreduce_ms = 0, lm_head_ms = 0, logits_ms = 0, launch_ms = 0, host_ms = 0;
  double elementwise_ms = 0;     // norms, residual adds, RoPE, SiLU
  double layer_overhead_ms = 0;  // layers × HardwareProfile::layer_us
  double step_ms = 0;            // = per-token latency of a decode step
  double tokens_per_s = 0;       // batch / step
  double tokens_per_s_per_device = 0;
  double comm_share = 0;         // (allreduce + logits) / step
  double allreduce_message_bytes = 0;
  CollectiveEstimate allreduce;  // one of the 2 × layers (+1 embedding) AllReduces
  bool latency_bound_comm = false;  // the AllReduce is dominated by its fixed latency
  bool compute_bound_gemm = false;  // FLOPs, not weight streaming, set the GEMM time
  // Memory per device (GB, 1e9 bytes).
  double weights_gb = 0, kv_gb = 0, activations_gb = 0;
  bool fits = false;
  int max_batch = 0;  // largest batch whose weights + KV + activations fit at this context
};

// The device work of one step without collectives (ms), each bound computed both ways, at the
// profile's efficiencies: what calibration compares with a measured step's compute time.
struct ComputeTerms {
  double gemm_stream_ms = 0, gemm_flops_ms = 0;        // all layers
  double attention_ms = 0;                             // KV reads, all layers
  double attention_flops_ms = 0;                       // QKᵀ and PV, all layers
  double lm_head_stream_ms = 0, lm_head_flops_ms = 0;
  double elementwise_ms = 0;                           // norms, residual adds, RoPE, SiLU: all layers
  bool overlapped = true;                              // HardwareProfile::compute_overlaps_memory
  double Gemm() const;                                 // the pair combined: max, or sum
  double Attention() const;                            // the larger of reads and FLOPs
  double LmHead() const;
  double Total() const;                                // GEMMs + attention + elementwise + LM head
};
ComputeTerms ComputeTermsAt(const ModelConfig& model, const HardwareProfile& profile, const EngineTraits& engine,
                            const DecodePoint& point);

// Any step the scheduler makes, decode or not. `tokens` rows go through every GEMM and AllReduce,
// `logit_rows` of them (the rows that sample) through the LM head and the logits gather, and
// attention computes over `attention_positions` (query, position) pairs in all: the sum, over the
// tokens fed, of the positions each attends to (batch × context for a decode step; chunk × (start +
// (chunk+1)/2) for a prefill chunk starting at `start`). Attention takes the larger of its FLOPs
// and its KV reads: `attention_read_positions`, the positions read from the KV cache, which a
// kernel that tiles a sequence's queries (HardwareProfile::attention_query_tile) reads once per
// tile (ShapeOfStep counts them; < 0: attention_positions, every query reading its own).
struct StepShape {
  int tp = 1;
  int tokens = 1;
  int logit_rows = 1;
  double attention_positions = 1;
  int weight_bytes = 2;
  double attention_read_positions = -1;
};

// The parts of one step (ms), summing to step_ms.
struct StepTime {
  double gemm_ms = 0, attention_ms = 0, allreduce_ms = 0, lm_head_ms = 0, logits_ms = 0, launch_ms = 0, host_ms = 0;
  double elementwise_ms = 0;  // norms, residual adds, RoPE, SiLU (ComputeTerms::elementwise_ms)
  double layer_overhead_ms = 0;
  double step_ms = 0;
  double allreduce_message_bytes = 0;
  CollectiveEstimate allreduce;     // one of the 2 × layers (+1 embedding) AllReduces
  bool compute_bound_gemm = false;  // FLOPs, not weight streaming, set the GEMM time
};

ComputeTerms ComputeTermsFor(const ModelConfig& model, const HardwareProfile& profile, const EngineTraits& engine,
                             const StepShape& shape);
Result<StepTime> PredictStepTime(const ModelConfig& model, const HardwareProfile& profile, const EngineTraits& engine,
                                 const StepShape& shape);

// KV cache bytes one device holds per position of one sequence at `tp` (its KV heads, K and V,
// every layer).
double KvBytesPerPosition(const ModelConfig& model, const EngineTraits& engine, int tp);

// The KV cache one device holds at `tp`, in positions (tokens of context, summed over sequences):
// what the profile's memory leaves (memory_gb × memory_utilization, shared by CPU ranks) after the
// device's weight shard and the activations of a step of `step_rows` rows; 0 when that is nothing.
double KvCapacityPositions(const ModelConfig& model, const HardwareProfile& profile, const EngineTraits& engine,
                           int tp, int weight_bytes, int step_rows);

Result<DecodePrediction> PredictDecodeStep(const ModelConfig& model, const HardwareProfile& profile,
                                           const EngineTraits& engine, const DecodePoint& point);

}  // namespace tpserve::planner
