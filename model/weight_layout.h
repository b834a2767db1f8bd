// Every weight a Llama-family checkpoint must hold, its shape for a config, and how tensor
// parallelism splits it (Megatron-style). This file is the one place that knows the layout, in
// the spirit of gpt-fast's tp.py: TP is "a layout plus two collectives".
//
// HF linear weights are stored [out_features, in_features]:
//   column-parallel (q/k/v, gate/up)  splits dim 0 (each rank owns some output features),
//   row-parallel    (o, down)         splits dim 1 (each rank owns some input features; the partial
//                                     outputs are summed by an AllReduce),
//   vocab-parallel  (embed, lm_head)  splits dim 0 by vocabulary rows, padded to a multiple of tp,
//   kv-column                         like column, but when num_kv_heads < tp each KV head is
//                                     replicated on tp / num_kv_heads ranks.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "model/checkpoint.h"
#include "model/model_config.h"

namespace tpserve {

enum class TpSplit { kReplicated, kColumn, kKvColumn, kRow, kVocab };

struct WeightSpec {
  std::string name;            // e.g. "model.layers.3.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // full (unsharded) shape
  TpSplit split = TpSplit::kReplicated;
};

std::vector<WeightSpec> ExpectedWeights(const ModelConfig& config);

// Checks that tp ranks can split this model: heads, KV heads and the FFN width must divide.
Status CheckTensorParallel(const ModelConfig& config, int tp);

// The slice of `spec` that `rank` of `tp` reads.
SliceSpec SliceFor(const WeightSpec& spec, const ModelConfig& config, int rank, int tp);

// Every expected tensor is present with its expected shape and a floating-point dtype.
Status ValidateCheckpoint(const Checkpoint& checkpoint, const ModelConfig& config);

}  // namespace tpserve
