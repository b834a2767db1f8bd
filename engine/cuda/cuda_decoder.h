// One rank's share of the Llama forward pass on a GPU: the CUDA twin of engine/cpu/decoder.h, with the
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
#include "kernels/cuda/device_buffer.h"
#include "engine/cuda/cuda_graph_shapes.h"
#include "engine/step/fault_injection.h"
#include "model/model_config.h"
#include "engine/step/rank_decoder.h"
#include "engine/step/rank_weights.h"

namespace tpserve::cuda {

struct CudaRankOptions {
  int device = 0;
  int block_size = 16;
  bool trace = true;
  // The step limits: every step buffer is allocated for them in Create and never grows (growing
  // would free device memory while peers wait in a collective); a larger step fails by name.
  int max_tokens = 8192;
  int max_sequences = 256;  // also the most logit rows of a step
  int max_context = 8192;   // the longest context a step attends to (block tables ⌈this / block_size⌉ wide)
  bool return_logits = true;  // false: copy back only the rows the host samples (none when all are greedy)
  std::chrono::milliseconds wait_timeout{60000};  // a step that does not finish by then fails
  // CUDA graphs for pure decode steps of up to graph_max_batch sequences and graph_max_context
  // positions, one per (batch, context) bucket (engine/cuda/cuda_graph_shapes.h), captured on first use.
  // Steps timed per op (set_trace(true)) run eagerly: per-op events would sit inside the graph.
  bool cuda_graphs = false;
  int graph_max_batch = 128;
  int graph_max_context = 8192;
  FaultInjection fault;  // tests: fail or throw at a forward pass (engine/step/fault_injection.h)
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
  size_t step_buffer_bytes() const { return step_buffer_bytes_; }  // device memory, at the limits
  // One AllReduce and one AllGather of the largest sizes a step sends, and one of a decode row,
  // run eagerly; every rank of the group calls it at the same point (on its own thread). NCCL and
  // the one-shot group allocate what they need for them, so that the KV cache is sized after.
  Status WarmUpCollectives();

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
  struct Activations;  // per-step buffers, allocated once at the step limits
  class Timeline;      // CUDA events around the ops
  struct StepDims {    // the shapes every kernel of a step is launched with
    int tokens = 0, sequences = 0, table_width = 0, logit_rows = 0, max_context = 0;
  };
  struct GraphKey {
    int batch = 0, context = 0;
    auto operator<=>(const GraphKey&) const = default;
  };
  // Sampling bans the device takes per logit row; a row with more is sampled on the host.
  static constexpr int kDeviceBansPerRow = 16;

  CudaDecoder(const ModelConfig& config, const RankShape& shape,
              std::unique_ptr<DeviceCommunicator> comm, const CudaRankOptions& options);
  Status Upload(const RankWeights& weights);
  // Allocates the step buffers for `limits` (once, in Create); returns the device bytes.
  Result<size_t> ReserveActivations(Activations& a, const StepDims& limits);
  // The step's shape against limits_: an error names what is over which limit.
  Status CheckLimits(const StepDims& dims, size_t ints) const;
  // Enqueues the whole step on the stream: the op sequence, rank 0's greedy sampling and its
  // tokens' copy to the host (what a graph captures).
  Status Enqueue(const StepDims& dims, Activations& a);
  // Rank 0: after the step, copies `rows` of the logits to host_logits as [rows, tp, vocab_local].
  Status EnqueueLogitsDownload(const StepDims& dims, const std::vector<int32_t>& rows);
  // Whether this step replays a graph, and which. Decided from what every rank holds alike (the
  // packed step, the trace flag, the communicator), so that all ranks replay or all run eagerly:
  // one eager rank would send other sizes to the collectives than its peers.
  bool ChooseGraph(const PackedStep& packed, GraphKey* key);
  // The LM head's weight: its own, or the embedding when tied.
  const DeviceBuffer& LmHeadWeight() const { return lm_head_weight_.bytes() ? lm_head_weight_ : embed_; }
  int GraphWidth(int context) const {
    return (context + options_.block_size - 1) / options_.block_size;
  }
  // Captures the key's graph on first use, then launches it. After a capture every rank learns
  // whether all captured (one AllReduce); if any failed, graphs go off on every rank together and
  // the step runs eagerly.
  Status LaunchGraph(const GraphKey& key, const StepDims& dims);
  // Captures the step's op sequence into a graph (nothing runs).
  Result<cudaGraphExec_t> Capture(const StepDims& dims);
  // Whether every rank passes `ok` (an eager AllReduce of one float); `ok` itself at TP=1.
  Result<bool> AllRanksOk(bool ok);
  void Log(const std::string& line) const {
    if (options_.log) options_.log(line);
  }
  // Waits for the stream, watching the communicator and the deadline (the step timeout, or
  // `timeout`).
  Status WaitForStream();
  Status WaitForStream(std::chrono::milliseconds timeout);
  // Loads every kernel a step launches, ours and cuBLASLt's, before any collective
  // (kernels/cuda/preload.cuh says why).
  Status LoadKernels();

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
  StepDims limits_;                  // the largest step the buffers hold
  size_t step_ints_capacity_ = 0;    // int32s of the step arrays (and bans) the buffers hold
  size_t step_buffer_bytes_ = 0;
  int64_t forwards_ = 0;             // forward passes run (fault injection counts them)
  std::unique_ptr<Activations> act_;  // every step's buffers, eager and graph: never moved
  std::unique_ptr<Timeline> timeline_;
  std::vector<int> graph_batches_, graph_contexts_;  // the buckets, ascending
  std::map<GraphKey, cudaGraphExec_t> graphs_;
  std::set<int> eager_batches_;  // buckets whose collectives the communicator cannot capture (logged once each)
  std::string
      graphs_off_;  // why graphs stopped (a communicator that cannot be captured, a failed capture)
};

}  // namespace tpserve::cuda
