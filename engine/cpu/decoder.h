// One rank's share of the Llama forward pass (Megatron-style tensor parallelism). Forward() reads
// top to bottom like the model card: embed, then per layer norm → QKV → RoPE → attention → O →
// AllReduce → norm → gate/up → SiLU·up → down → AllReduce, then the vocab-parallel LM head and an
// AllGather of the logits. Every op is timed into the step trace.
#pragma once

#include <vector>

#include "comm/communicator.h"
#include "engine/step/fault_injection.h"
#include "engine/step/kv_cache.h"
#include "engine/step/rank_decoder.h"
#include "engine/step/rank_weights.h"
#include "engine/step/step_plan.h"
#include "kernels/cpu/greedy_linear.h"
#include "kernels/cpu/member_placement.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"
#include "model/model_config.h"

namespace tpserve {

// The model's rotary embedding as the kernels take it (both backends).
cpu::RopeParams RopeParamsFor(const ModelConfig& config);

struct DecoderOptions {
  bool trace = true;  // time every op into the step trace (off: only the rank's total)
  // Fault injection for tests: skip the MLP AllReduce of this layer (-1: never).
  int skip_mlp_allreduce_layer = -1;
  // Fault injection for tests (engine/step/fault_injection.h): acted out at the start of the pass
  // (fail, throw) or at its first collective (stall, comm-error). Stalled ranks wait on `release`.
  FaultInjection fault;
  const StallRelease* stall_release = nullptr;
  // false: the engine wants only the sampled tokens, so at TP 1 a step whose rows are all greedy
  // (without logprobs) has the LM head find their tokens (device_tokens) and returns no logits.
  bool return_logits = true;
};

class Decoder final : public RankDecoder {
 public:
  Decoder(const ModelConfig& config, RankWeights weights, RankKvCache* kv_cache,
          Communicator* comm, cpu::ThreadPool* pool, DecoderOptions options = {});

  // Runs the plan on this rank. On return `logits` holds [rows, vocab_padded] for the sequences
  // that want logits (every rank gets them through the AllGather), or nothing where the LM head
  // found every row's token itself (device_tokens); pass the same vector every step so its memory
  // is reused.
  Status Forward(const StepPlan& plan, std::vector<float>* logits, RankTrace* trace) override;

  // After Forward at TP 1 with return_logits off: every row's greedy token when all rows were
  // greedy (cpu::GreedyLinear), else empty.
  std::span<const int32_t> device_tokens() const override { return device_tokens_; }

  const RankShape& shape() const override { return weights_.shape; }
  void set_trace(bool on) override { options_.trace = on; }
  void AbortCollectives() override {
    if (comm_ != nullptr) comm_->Abort();
  }
  const RankWeights& weights() const { return weights_; }

 private:
  struct Batch;  // the plan flattened to tokens
  void Embed(const Batch& batch, float* x);
  void Attention(const Batch& batch, int layer, const float* q, float* out);
  // Moves the layers' projections into placement_, for pool_'s members in call order.
  void PlaceLayerProjections();

  const ModelConfig& config_;
  RankWeights weights_;
  RankKvCache* kv_cache_;
  Communicator* comm_;
  cpu::ThreadPool* pool_;
  // The layers' projections, each pool member's rows of them in call order (kernels/cpu/
  // member_placement.h): matrix 4 l + k is layer l's qkv, o, gate/up, down (k = 0..3). The
  // LayerWeights keep their shapes, not their bytes.
  cpu::MemberPlacement placement_;
  DecoderOptions options_;
  std::vector<double> rope_inv_freq_;
  int64_t forwards_ = 0;
  std::vector<float> local_logits_;    // [rows, vocab_local], TP > 1
  std::vector<float> gathered_logits_; // [tp, rows, vocab_local], TP > 1
  // The LM head's row norm bounds where it screens greedy rows (TP 1, return_logits off, a kernel
  // that screens: cpu::GreedyLinearScreens); empty otherwise.
  cpu::RowNorms lm_head_norms_;
  std::vector<int32_t> device_tokens_;  // [logit rows] or empty: device_tokens()
};

}  // namespace tpserve
