#include "model/weight_layout.h"

namespace tpserve {

std::vector<WeightSpec> ExpectedWeights(const ModelConfig& c) {
  const int64_t h = c.hidden_size, f = c.intermediate_size, q = c.q_size(), kv = c.kv_size();
  std::vector<WeightSpec> weights;
  weights.push_back({"model.embed_tokens.weight", {c.vocab_size, h}, TpSplit::kVocab});
  for (int layer = 0; layer < c.num_layers; ++layer) {
    const std::string p = "model.layers." + std::to_string(layer) + ".";
    weights.push_back({p + "input_layernorm.weight", {h}, TpSplit::kReplicated});
    weights.push_back({p + "self_attn.q_proj.weight", {q, h}, TpSplit::kColumn});
    weights.push_back({p + "self_attn.k_proj.weight", {kv, h}, TpSplit::kKvColumn});
    weights.push_back({p + "self_attn.v_proj.weight", {kv, h}, TpSplit::kKvColumn});
    if (c.attention_bias) {
      weights.push_back({p + "self_attn.q_proj.bias", {q}, TpSplit::kColumn});
      weights.push_back({p + "self_attn.k_proj.bias", {kv}, TpSplit::kKvColumn});
      weights.push_back({p + "self_attn.v_proj.bias", {kv}, TpSplit::kKvColumn});
    }
    weights.push_back({p + "self_attn.o_proj.weight", {h, q}, TpSplit::kRow});
    weights.push_back({p + "post_attention_layernorm.weight", {h}, TpSplit::kReplicated});
    weights.push_back({p + "mlp.gate_proj.weight", {f, h}, TpSplit::kColumn});
    weights.push_back({p + "mlp.up_proj.weight", {f, h}, TpSplit::kColumn});
    weights.push_back({p + "mlp.down_proj.weight", {h, f}, TpSplit::kRow});
  }
  weights.push_back({"model.norm.weight", {h}, TpSplit::kReplicated});
  if (!c.tie_word_embeddings) {
    weights.push_back({"lm_head.weight", {c.vocab_size, h}, TpSplit::kVocab});
  }
  return weights;
}

Status CheckTensorParallel(const ModelConfig& c, int tp) {
  auto fail = [&](const std::string& what, int value) {
    return InvalidArgument("--tp " + std::to_string(tp) + " does not divide " + what + " (" +
                           std::to_string(value) + ")");
  };
  if (tp < 1) return InvalidArgument("--tp must be at least 1, got " + std::to_string(tp));
  if (c.num_heads % tp != 0) return fail("num_attention_heads", c.num_heads);
  if (c.intermediate_size % tp != 0) return fail("intermediate_size", c.intermediate_size);
  if (c.num_kv_heads % tp != 0 && tp % c.num_kv_heads != 0) {
    return InvalidArgument("--tp " + std::to_string(tp) + " and num_key_value_heads (" +
                           std::to_string(c.num_kv_heads) +
                           ") must divide one another to shard or replicate KV heads");
  }
  return Status::Ok();
}

SliceSpec SliceFor(const WeightSpec& spec, const ModelConfig& c, int rank, int tp) {
  switch (spec.split) {
    case TpSplit::kReplicated: return {};
    case TpSplit::kColumn: return {.dim = 0, .part = rank, .num_parts = tp};
    case TpSplit::kRow: return {.dim = 1, .part = rank, .num_parts = tp};
    case TpSplit::kVocab: return {.dim = 0, .part = rank, .num_parts = tp, .zero_pad = true};
    case TpSplit::kKvColumn:
      if (c.num_kv_heads >= tp) return {.dim = 0, .part = rank, .num_parts = tp};
      // Fewer KV heads than ranks: rank r serves KV head r / (tp / num_kv_heads).
      return {.dim = 0, .part = rank / (tp / c.num_kv_heads), .num_parts = c.num_kv_heads};
  }
  return {};
}

Status ValidateCheckpoint(const Checkpoint& checkpoint, const ModelConfig& config) {
  for (const WeightSpec& spec : ExpectedWeights(config)) {
    const SafetensorsTensor* tensor = checkpoint.Find(spec.name);
    if (tensor == nullptr) {
      return NotFound(checkpoint.dir() + ": missing tensor '" + spec.name + "' (expected shape " +
                      ShapeToString(spec.shape) + ")");
    }
    if (tensor->shape != spec.shape) {
      return InvalidArgument(checkpoint.dir() + ": tensor '" + spec.name + "' has shape " +
                             ShapeToString(tensor->shape) + " but config.json implies " +
                             ShapeToString(spec.shape));
    }
    if (!tensor->dtype) {
      return InvalidArgument(checkpoint.dir() + ": tensor '" + spec.name + "' has dtype " +
                             tensor->dtype_name + "; weights must be F32, F16 or BF16");
    }
  }
  return Status::Ok();
}

}  // namespace tpserve
