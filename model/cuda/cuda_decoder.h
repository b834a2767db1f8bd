// One rank's share of the Llama forward pass on a GPU: the CUDA twin of model/decoder.h, with the
// same op sequence, the same step trace (from CUDA events) and the same logits contract. Weights
// are bf16 on the device, activations f32 (rounded to bf16 as GEMM inputs), the KV cache f32 in
// blocks addressed by the engine's block tables. Module-internal.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "comm/device_communicator.h"
#include "kernels/cuda/gemm.h"
#include "model/cuda/device_buffer.h"
#include "model/model_config.h"
#include "model/rank_decoder.h"
#include "model/rank_weights.h"

namespace tpserve::cuda {

struct CudaRankOptions {
  int device = 0;
  int block_size = 16;
  bool trace = true;
  int max_tokens = 8192;
  bool return_logits = true;  // false: no logits copy when every row is sampled on the device
  std::chrono::milliseconds wait_timeout{60000};  // a step that does not finish by then fails
};

class CudaDecoder final : public RankDecoder {
 public:
  // Uploads `weights` to options.device and chooses the GEMM algorithms. `comm` is null at TP=1.
  static Result<std::unique_ptr<CudaDecoder>> Create(const ModelConfig& config, const RankWeights& weights,
                                                     std::unique_ptr<DeviceCommunicator> comm,
                                                     const CudaRankOptions& options);
  ~CudaDecoder() override;

  // The KV cache: [num_blocks, block_size, kv_heads, head_dim] f32 keys and values per layer.
  Status AllocateKvCache(int num_blocks);
  size_t weight_bytes() const { return weight_bytes_; }

  // Rank 0 returns the logits; the other ranks take part in every collective and leave `logits`
  // empty (the engine reads rank 0's).
  Status Forward(const StepPlan& plan, std::vector<float>* logits, RankTrace* trace) override;
  const RankShape& shape() const override { return shape_; }
  void set_trace(bool on) override;
  std::span<const int32_t> device_tokens() const override { return device_tokens_; }

 private:
  struct Layer {
    DeviceBuffer attn_norm, wqkv, bqkv, wo, mlp_norm, w_gate_up, w_down;  // as LayerWeights
    DeviceBuffer keys, values;  // [num_blocks * block_size, kv_heads, head_dim] f32
  };
  struct Activations;  // per-step buffers, grown to the largest step
  class Timeline;      // CUDA events around the ops

  CudaDecoder(const ModelConfig& config, const RankShape& shape, std::unique_ptr<DeviceCommunicator> comm,
              const CudaRankOptions& options);
  Status Upload(const RankWeights& weights);
  // Waits for the stream, watching the communicator and the deadline.
  Status WaitForStream();

  const ModelConfig& config_;
  RankShape shape_;
  std::unique_ptr<DeviceCommunicator> comm_;
  CudaRankOptions options_;
  void* stream_ = nullptr;  // cudaStream_t
  cudaEvent_t finished_ = nullptr;
  std::unique_ptr<BlasContext> blas_;
  std::unique_ptr<Bf16Linear> qkv_, o_, gate_up_, down_, lm_head_;
  DeviceBuffer embed_, final_norm_, lm_head_weight_, inv_freq_;  // lm_head_weight_ empty when tied
  std::vector<Layer> layers_;
  int kv_blocks_ = 0;
  size_t weight_bytes_ = 0;
  std::vector<int32_t> device_tokens_;  // rank 0: [logit rows], -1 where the host samples
  std::unique_ptr<Activations> act_;
  std::unique_ptr<Timeline> timeline_;
};

}  // namespace tpserve::cuda
