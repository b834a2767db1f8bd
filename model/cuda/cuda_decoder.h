// One rank's share of the Llama forward pass on a GPU: the CUDA twin of model/decoder.h, with the
// same op sequence, the same step trace (from CUDA events) and the same logits contract. Weights
// are bf16 on the device, activations f32 (rounded to bf16 as GEMM inputs), the KV cache f32 in
// blocks addressed by the engine's block tables. Module-internal.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include "comm/device_communicator.h"
#include "kernels/cuda/gemm.h"
#include "model/cuda/device_buffer.h"
#include "model/cuda_graph_shapes.h"
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
  // CUDA graphs for pure decode steps of up to graph_max_batch sequences and graph_max_context
  // positions, one per (batch, context) bucket (model/cuda_graph_shapes.h), captured on first use.
  // Steps timed per op (set_trace(true)) run eagerly: per-op events would sit inside the graph.
  bool cuda_graphs = false;
  int graph_max_batch = 128;
  int graph_max_context = 8192;
  std::function<void(const std::string&)> log;  // one line per event worth logging
};

class CudaDecoder final : public RankDecoder {
 public:
  // Uploads `weights` to options.device and chooses the GEMM algorithms. `comm` is null at TP=1.
  static Result<std::unique_ptr<CudaDecoder>> Create(const ModelConfig& config,
                                                     const RankWeights& weights,
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
  // Aborts this rank's device communicator: the in-process peers see it at their next check (a
  // shared flag), one-shot kernels at their next barrier spin, NCCL peers through ncclCommAbort.
  void AbortCollectives() override {
    if (comm_ != nullptr) comm_->Abort();
  }
  std::span<const int32_t> device_tokens() const override { return device_tokens_; }

 private:
  struct Layer {
    DeviceBuffer attn_norm, wqkv, bqkv, wo, mlp_norm, w_gate_up, w_down;  // as LayerWeights
    DeviceBuffer keys, values;  // [num_blocks * block_size, kv_heads, head_dim] f32
  };
  struct Activations;  // per-step buffers, grown to the largest step
  class Timeline;      // CUDA events around the ops
  struct StepDims {    // the shapes every kernel of a step is launched with
    int tokens = 0, sequences = 0, table_width = 0, logit_rows = 0, max_context = 0;
  };
  struct GraphKey {
    int batch = 0, context = 0;
    bool copy_logits = false;
    auto operator<=>(const GraphKey&) const = default;
  };
  static constexpr int kGraphBansPerRow = 16;  // a step with more sampling bans runs eagerly

  CudaDecoder(const ModelConfig& config, const RankShape& shape,
              std::unique_ptr<DeviceCommunicator> comm, const CudaRankOptions& options);
  Status Upload(const RankWeights& weights);
  Status ReserveActivations(Activations& a, const StepDims& dims, bool copy_logits);
  // Enqueues the whole step on the stream: the op sequence, sampling and the copies to the host.
  Status Enqueue(const StepDims& dims, Activations& a, bool copy_logits);
  // Whether this step replays a graph, and which; the graph buffers exist once graphs are on.
  bool ChooseGraph(const PackedStep& packed, const DeviceSamplingPlan& sampling, bool copy_logits,
                   GraphKey* key);
  Status PrepareGraphBuffers();
  int GraphWidth(int context) const {
    return (context + options_.block_size - 1) / options_.block_size;
  }
  // Captures the key's graph on first use (eager from then on if capture fails), then launches it.
  Status LaunchGraph(const GraphKey& key, const StepDims& dims, bool copy_logits);
  void Log(const std::string& line) const {
    if (options_.log) options_.log(line);
  }
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
  std::vector<int> graph_batches_, graph_contexts_;  // the buckets, ascending
  std::unique_ptr<Activations>
      graph_act_;  // the graphs' buffers: the largest bucket's, never moved
  std::map<GraphKey, cudaGraphExec_t> graphs_;
  std::set<int> eager_batches_;  // buckets whose collectives the communicator cannot capture (logged once each)
  std::string
      graphs_off_;  // why graphs stopped (a communicator that cannot be captured, a failed capture)
};

}  // namespace tpserve::cuda
