#include "engine/step/rank_weights.h"

#include "model/weight_layout.h"

namespace tpserve {

RankShape ShapeForRank(const ModelConfig& c, int rank, int tp) {
  RankShape s;
  s.rank = rank;
  s.tp = tp;
  s.heads = c.num_heads / tp;
  s.kv_heads = c.num_kv_heads >= tp ? c.num_kv_heads / tp : 1;
  s.head_dim = c.head_dim;
  s.ffn = c.intermediate_size / tp;
  s.vocab_padded = (c.vocab_size + tp - 1) / tp * tp;
  s.vocab = s.vocab_padded / tp;
  s.vocab_begin = s.vocab * rank;
  return s;
}

size_t RankWeights::Bytes() const {
  size_t bytes = embed.bytes.size() + final_norm.bytes.size() + lm_head.bytes.size();
  for (const auto& l : layers) {
    for (const HostTensor* t : {&l.attn_norm, &l.wqkv, &l.bqkv, &l.wo, &l.mlp_norm, &l.w_gate_up,
                                &l.w_down}) {
      bytes += t->bytes.size();
    }
  }
  return bytes;
}

namespace {

// Stacks tensors of equal trailing shape along dim 0 (empty parts are skipped).
HostTensor StackRows(std::initializer_list<const HostTensor*> parts) {
  HostTensor out;
  size_t total_bytes = 0;
  for (const HostTensor* part : parts) total_bytes += part->bytes.size();
  out.bytes.reserve(total_bytes);  // one allocation, not one per part
  for (const HostTensor* part : parts) {
    if (part->bytes.empty()) continue;
    if (out.shape.empty()) {
      out.dtype = part->dtype;
      out.shape = part->shape;
      out.shape[0] = 0;
    }
    out.shape[0] += part->shape[0];
    out.bytes.insert(out.bytes.end(), part->bytes.begin(), part->bytes.end());
  }
  return out;
}

// The per-tensor slices of one layer, before stacking.
struct LayerParts {
  HostTensor wq, wk, wv, bq, bk, bv, w_gate, w_up;
};

}  // namespace

Result<RankWeights> LoadRankWeights(const Checkpoint& checkpoint, const ModelConfig& config,
                                    int rank, int tp) {
  RETURN_IF_ERROR(CheckTensorParallel(config, tp));
  RankWeights w;
  w.shape = ShapeForRank(config, rank, tp);
  w.layers.resize(config.num_layers);
  std::vector<LayerParts> parts(config.num_layers);
  // Norms and biases are small and added in f32; projections stay bf16.
  for (const WeightSpec& spec : ExpectedWeights(config)) {
    const bool is_vector = spec.shape.size() == 1;
    ASSIGN_OR_RETURN(HostTensor t, checkpoint.Read(spec.name, is_vector ? DType::kF32 : DType::kBF16,
                                                   SliceFor(spec, config, rank, tp)));
    const std::string& n = spec.name;
    if (n == "model.embed_tokens.weight") { w.embed = std::move(t); continue; }
    if (n == "model.norm.weight") { w.final_norm = std::move(t); continue; }
    if (n == "lm_head.weight") { w.lm_head = std::move(t); continue; }
    // "model.layers.<i>.<rest>"
    const size_t dot = n.find('.', 13);
    const int index = std::stoi(n.substr(13, dot - 13));
    LayerWeights& l = w.layers[index];
    LayerParts& p = parts[index];
    const std::string rest = n.substr(dot + 1);
    HostTensor* slot =
        rest == "input_layernorm.weight" ? &l.attn_norm
        : rest == "self_attn.q_proj.weight" ? &p.wq
        : rest == "self_attn.k_proj.weight" ? &p.wk
        : rest == "self_attn.v_proj.weight" ? &p.wv
        : rest == "self_attn.q_proj.bias" ? &p.bq
        : rest == "self_attn.k_proj.bias" ? &p.bk
        : rest == "self_attn.v_proj.bias" ? &p.bv
        : rest == "self_attn.o_proj.weight" ? &l.wo
        : rest == "post_attention_layernorm.weight" ? &l.mlp_norm
        : rest == "mlp.gate_proj.weight" ? &p.w_gate
        : rest == "mlp.up_proj.weight" ? &p.w_up
        : rest == "mlp.down_proj.weight" ? &l.w_down
        : nullptr;
    if (slot == nullptr) return Internal("weight_layout lists '" + n + "' but no slot holds it");
    *slot = std::move(t);
  }
  for (int i = 0; i < config.num_layers; ++i) {
    LayerParts& p = parts[i];
    w.layers[i].wqkv = StackRows({&p.wq, &p.wk, &p.wv});
    w.layers[i].bqkv = StackRows({&p.bq, &p.bk, &p.bv});
    w.layers[i].w_gate_up = StackRows({&p.w_gate, &p.w_up});
  }
  return w;
}

void ArrangeProjections(cpu::LinearKernel kernel, RankWeights* weights) {
  auto arrange = [&](HostTensor& matrix) {  // [out, in] bf16
    if (matrix.bytes.empty()) return;
    const int out = static_cast<int>(matrix.shape[0]), in = static_cast<int>(matrix.shape[1]);
    cpu::ArrangeWeights(matrix.view<uint16_t>().data(), out, in, cpu::PreferredLayout(kernel, in));
  };
  for (LayerWeights& layer : weights->layers) {
    arrange(layer.wqkv);
    arrange(layer.wo);
    arrange(layer.w_gate_up);
    arrange(layer.w_down);
  }
  arrange(weights->lm_head.bytes.empty() ? weights->embed : weights->lm_head);
  weights->kernel = kernel;
}

}  // namespace tpserve
