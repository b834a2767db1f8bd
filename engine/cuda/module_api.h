// The C++ ABI between the tpserve binary and the CUDA module (libtpserve_cuda.so): the structs the
// binary passes to the module's extern "C" entry points and gets back, and the entry points' types.
// The module (engine/cuda/module_entry.cc) implements them; the binary calls them through dlopen
// (engine/cuda_backend.h). No CUDA headers, so both sides include it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/step/fault_injection.h"
#include "engine/step/rank_decoder.h"
#include "engine/step/rank_weights.h"
#include "model/model_config.h"

namespace tpserve {

// Bumped whenever the structs below change: the engine refuses a module built from other headers.
inline constexpr int kCudaModuleAbi = 6;

// ncclUniqueId's size (NCCL_UNIQUE_ID_BYTES), checked against nccl.h inside the module.
inline constexpr size_t kNcclUniqueIdBytes = 128;

struct CudaGroupOptions {
  int tp = 1;  // the whole group's TP degree
  // Multi-process TP: this process runs global ranks [first_rank, first_rank + local_ranks) on its
  // visible GPUs first_device, first_device + 1, ...; the NCCL communicator spans every process
  // and is made from the leader's `nccl_unique_id` (kNcclUniqueIdBytes, shared through the
  // rendezvous). local_ranks 0: one process runs all tp ranks (ncclCommInitAll).
  int first_rank = 0;
  int local_ranks = 0;
  int first_device = 0;
  std::string nccl_unique_id;
  // Every rank on the first visible GPU, summed by the rank-order communicator: TP > 1 on a
  // one-GPU machine, for tests (NCCL refuses two ranks on one device).
  bool share_gpu = false;
  // AllReduces of up to this many bytes per rank run one-shot (comm/cuda/oneshot_communicator.h),
  // fused with the residual add and RMSNorm; 0: all over NCCL (or rank-order with share_gpu).
  // Decided on the host from --allreduce (comm/allreduce_choice.h).
  size_t oneshot_max_bytes = 0;
  // CUDA graphs for decode steps of up to cuda_graph_max_batch sequences (--cuda-graphs on).
  bool cuda_graphs = false;
  int cuda_graph_max_batch = 128;
  int block_size = 16;
  int kv_cache_blocks = 0;      // > 0: exactly this many KV blocks
  int64_t kv_cache_bytes = 0;   // > 0: this many bytes of KV cache, all ranks together
  double gpu_memory_utilization = 0.9;  // otherwise: this share of each GPU's memory, weights included
  bool trace = true;            // CUDA events around every op (off: only the step's total)
  bool return_logits = true;    // false: copy back only the logit rows the host samples
  // The engine's step limits (EngineOptions::max_step_tokens, max_step_sequences): every step
  // buffer is allocated for them before the KV cache is sized, and never grows; a larger step fails.
  int max_tokens_per_step = 8192;
  int max_sequences_per_step = 256;
  // The longest context a step may attend to (0: the model's max_position_embeddings).
  int max_context = 0;
  FaultInjection fault;  // fault injection for tests: fail and throw kinds only
  std::chrono::milliseconds collective_timeout{60000};  // a rank stalled longer fails the step
};

struct CudaGroupRequest {
  const ModelConfig* config = nullptr;
  CudaGroupOptions options;
  // Rank r's slice of the weights on the host (LoadRankWeights), loaded one rank at a time.
  std::function<Result<RankWeights>(int rank)> load_rank;
  std::function<void(const std::string&)> log;  // one line per event worth logging (load times, NCCL)
};

struct CudaGroup {
  std::vector<std::unique_ptr<RankDecoder>> ranks;  // rank r at index r
  int kv_blocks = 0;                                // blocks every rank holds
  std::string communicator;                         // "nccl 2.28.3", "rank-order", "none"
};

// `bench-comm --backend nccl|rank-order|oneshot`: one collective over device buffers, timed with
// CUDA events on each rank's stream (one host thread per rank), nccl-tests style.
struct DeviceCommBenchRequest {
  // nccl: one GPU per rank; rank-order: every rank on GPU 0; oneshot: one GPU per rank where there
  // are enough, else every rank on GPU 0 (AllReduce only; AllGather goes to its fallback).
  std::string backend = "nccl";
  bool all_gather = false;       // else AllReduce (sum)
  int ranks = 1;
  std::vector<size_t> counts;    // f32 elements per rank's input, one sweep point each
  int iters = 20;
  int warmup = 5;
  bool check = true;
  std::chrono::milliseconds timeout{60000};  // the rank-order barriers' timeout
  // nccl: also time `graph_calls` out-of-place calls captured in one CUDA graph (0: none).
  int graph_calls = 0;
  // nccl: the buffers come from ncclMemAlloc, registered as symmetric windows (NCCL >= 2.27).
  bool register_windows = false;
  // nccl across processes: `ranks` are this process's, global ranks first_rank.., of `world`
  // (0: all ranks are here), on GPUs first_device.., joined with the leader's ncclUniqueId bytes.
  int world = 0;
  int first_rank = 0;
  int first_device = 0;
  std::string nccl_unique_id;
};
struct DeviceCommBenchRow {
  size_t count = 0;
  double oop_s = 0, ip_s = 0;  // mean time per call, averaged over ranks (nccl-tests' default)
  size_t oop_wrong = 0, ip_wrong = 0;
  double graph_s = 0;  // per call inside the graph (graph_calls > 0), averaged over ranks
};
struct DeviceCommBenchReply {
  std::string library;  // "nccl 2.28.3 (NCCL_ALGO=..., NCCL_PROTO=...)", "rank-order", "oneshot (over ...)"
  std::string placement;  // "one GPU per rank" or "ranks sharing cuda:0"
  std::string device;     // the first rank's GPU name
  std::vector<DeviceCommBenchRow> rows;
};

// The module's entry points (extern "C"): the ABI version, the group factory, the bandwidth probe
// and the collective benchmark.
using CudaModuleAbiFn = int (*)();
using CudaCreateGroupFn = void (*)(const CudaGroupRequest* request, Result<CudaGroup>* reply);
using CudaReadBandwidthFn = void (*)(int device, size_t bytes, Result<double>* reply);
using CudaCommBenchFn = void (*)(const DeviceCommBenchRequest* request, Result<DeviceCommBenchReply>* reply);
using CudaNcclUniqueIdFn = void (*)(Result<std::string>* reply);

}  // namespace tpserve
