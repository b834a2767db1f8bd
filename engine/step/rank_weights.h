// One rank's shard of every weight, read from the checkpoint through weight_layout's slices.
// Projections stay bf16 ([out, in] as in the checkpoint); norms and biases become f32.
#pragma once

#include <vector>

#include "common/status.h"
#include "kernels/cpu/linear.h"
#include "model/checkpoint.h"
#include "model/host_tensor.h"
#include "model/model_config.h"

namespace tpserve {

// q/k/v and gate/up are stacked into one matrix each (as vLLM's QKVParallelLinear and
// MergedColumnParallelLinear do): one pass over the weights per block, and every output row is
// the same dot product it would be unstacked.
struct LayerWeights {
  HostTensor attn_norm;  // [hidden] f32
  HostTensor wqkv;       // [q_local + 2 * kv_local, hidden] bf16: rows of q, then k, then v
                         // (q_local = heads_local * head_dim, kv_local = kv_heads_local * head_dim)
  HostTensor bqkv;       // [q_local + 2 * kv_local] f32 (attention_bias models only, else empty)
  HostTensor wo;         // [hidden, q_local] bf16 (row-parallel)
  HostTensor mlp_norm;   // [hidden] f32
  HostTensor w_gate_up;  // [2 * ffn_local, hidden] bf16: rows of gate, then up
  HostTensor w_down;     // [hidden, ffn_local] bf16 (row-parallel)
};

// How the model divides among ranks (Megatron-style).
struct RankShape {
  int rank = 0;
  int tp = 1;
  int heads = 0;        // query heads on this rank
  int kv_heads = 0;     // KV heads on this rank (1 when replicated)
  int head_dim = 0;
  int ffn = 0;          // intermediate features on this rank
  int vocab = 0;        // vocabulary rows on this rank (padded vocab / tp)
  int vocab_begin = 0;  // first vocabulary id of this rank
  int vocab_padded = 0; // vocab_size rounded up to a multiple of tp
};

RankShape ShapeForRank(const ModelConfig& config, int rank, int tp);

struct RankWeights {
  RankShape shape;
  HostTensor embed;       // [vocab_local, hidden] bf16, rows past vocab_size are zero
  std::vector<LayerWeights> layers;
  HostTensor final_norm;  // [hidden] f32
  HostTensor lm_head;     // [vocab_local, hidden] bf16; empty when tied to `embed`

  // The Linear kernel the projections are arranged for (ArrangeProjections); row-major until then.
  cpu::LinearKernel kernel = cpu::LinearKernel::kAvx512;

  const HostTensor& output_projection() const { return lm_head.bytes.empty() ? embed : lm_head; }
  // The layout of a projection with `in` columns.
  cpu::WeightLayout layout(int in) const { return cpu::PreferredLayout(kernel, in); }
  // The embedding's: arranged with the LM head when tied to it, else row-major.
  cpu::WeightLayout embed_layout() const {
    return lm_head.bytes.empty() ? layout(static_cast<int>(embed.shape[1])) : cpu::WeightLayout::kRowMajor;
  }
  size_t Bytes() const;
};

Result<RankWeights> LoadRankWeights(const Checkpoint& checkpoint, const ModelConfig& config,
                                    int rank, int tp);

// Rearranges every projection (and a tied embedding with its LM head) in place into the layout
// `kernel` reads fastest, once at load.
void ArrangeProjections(cpu::LinearKernel kernel, RankWeights* weights);

}  // namespace tpserve
