// The CUDA module's entry points (engine/cuda_backend.h calls them through dlopen): the ABI
// version; the group factory, which places the ranks on GPUs, creates their communicators,
// uploads each rank's weights and sizes the KV cache; and the read-bandwidth probe. The device
// probe is kernels/cuda/device_probe.cu.
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <thread>
#include <algorithm>

#include "engine/cuda/device_comm_bench.h"
#include "comm/cuda/nccl_communicator.h"
#include "comm/cuda/oneshot_communicator.h"
#include "comm/cuda/rank_order_communicator.h"
#include "kernels/cuda/memory_bandwidth.h"
#include "engine/cuda/cuda_decoder.h"
#include "engine/cuda/module_api.h"
#include "engine/cuda/placement.h"
#include "engine/step/kv_cache.h"

namespace tpserve::cuda {
namespace {

Result<std::vector<std::unique_ptr<DeviceCommunicator>>> CreateCommunicators(
    const std::vector<int>& devices, const CudaGroupOptions& options, const std::function<void(const std::string&)>& log) {
  if (options.local_ranks > 0) {  // this process's share of a group over several processes
    if (options.share_gpu) return InvalidArgument("--share-gpu runs in one process only (no multi-process TP)");
    if (options.oneshot_max_bytes > 0) log("--allreduce: one-shot runs between the GPUs of one process; NCCL here");
    return JoinNcclGroup(devices, options.first_rank, options.tp, options.nccl_unique_id);
  }
  const int tp = static_cast<int>(devices.size());
  if (tp == 1) {
    std::vector<std::unique_ptr<DeviceCommunicator>> none;
    none.emplace_back();
    return none;
  }
  std::vector<std::unique_ptr<DeviceCommunicator>> base;
  if (options.share_gpu) {
    ASSIGN_OR_RETURN(base, CreateRankOrderGroup(tp, devices[0], options.collective_timeout));
  } else {
    ASSIGN_OR_RETURN(base, CreateNcclGroup(devices));
  }
  if (options.oneshot_max_bytes == 0) return base;
  if (Status peers = CheckPeerAccess(devices); !peers.ok()) {  // a PCIe box without P2P
    log("--allreduce: one-shot needs peer access, and " + peers.message() + "; every AllReduce runs over " +
        base[0]->name());
    return base;
  }
  return CreateOneShotGroup(devices, std::move(base),
                            {.capacity_bytes = options.oneshot_max_bytes, .timeout = options.collective_timeout});
}

constexpr double kGiB = 1073741824.0;

Status WarmUpCollectives(const std::vector<CudaDecoder*>& decoders) {
  if (decoders.size() == 1) return decoders[0]->WarmUpCollectives();  // a process's share, or TP=1
  std::vector<Status> statuses(decoders.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < decoders.size(); ++i) {
    threads.emplace_back([&, i] { statuses[i] = decoders[i]->WarmUpCollectives(); });
  }
  for (std::thread& thread : threads) thread.join();
  for (const Status& status : statuses) RETURN_IF_ERROR(status);
  return Status::Ok();
}

// One line per GPU: where its memory went before the KV cache (weights, step buffers, the rest:
// the CUDA context, cuBLASLt's workspace, NCCL's and the one-shot buffers) and what is left for it.
void LogMemorySplit(const GpuMemory& gpu, const std::vector<int>& devices, const std::vector<CudaDecoder*>& decoders,
                    double utilization, const std::function<void(const std::string&)>& log) {
  size_t weights = 0, steps = 0;
  for (size_t i = 0; i < decoders.size(); ++i) {
    if (devices[i] != gpu.device) continue;
    weights += decoders[i]->weight_bytes();
    steps += decoders[i]->step_buffer_bytes();
  }
  const size_t used = gpu.total_bytes - gpu.free_bytes;
  const size_t other = used > weights + steps ? used - weights - steps : 0;
  const double budget = utilization * static_cast<double>(gpu.total_bytes) - static_cast<double>(used);
  char line[256];
  std::snprintf(line, sizeof(line),
                "cuda:%d memory: %.2f GiB total; weights %.2f GiB, step buffers %.2f GiB, CUDA context, cuBLASLt "
                "and communicators %.2f GiB; %.2f GiB left for the KV cache at --gpu-memory-utilization %.2f",
                gpu.device, gpu.total_bytes / kGiB, weights / kGiB, steps / kGiB, other / kGiB,
                std::max(0.0, budget) / kGiB, utilization);
  log(line);
}

Result<CudaGroup> CreateGroup(const CudaGroupRequest& request) {
  const CudaGroupOptions& options = request.options;
  const ModelConfig& config = *request.config;
  // By value: every rank keeps a copy and logs during steps, long after `request`'s frame is gone.
  const std::function<void(const std::string&)> log = [sink = request.log](const std::string& line) {
    if (sink) sink(line);
  };
  int visible = 0;
  RETURN_IF_ERROR(CudaStatus(cudaGetDeviceCount(&visible), "cudaGetDeviceCount"));
  const int local_ranks = options.local_ranks > 0 ? options.local_ranks : options.tp;
  ASSIGN_OR_RETURN(std::vector<int> devices, AssignDevices(local_ranks, visible, options.share_gpu, options.first_device));
  ASSIGN_OR_RETURN(auto comms, CreateCommunicators(devices, options, log));
  CudaGroup group;
  group.communicator = comms[0] ? comms[0]->name() : "none";
  if (options.tp > 1) log("communicator: " + group.communicator + " over " + std::to_string(options.tp) + " ranks");

  // The longest context a step may reach: the engine's limit, else the model's (else 8192, as
  // the engine's kDefaultMaxContext).
  const int max_context = options.max_context > 0                  ? options.max_context
                          : config.max_position_embeddings > 0 ? config.max_position_embeddings
                                                                 : 8192;
  std::vector<cuda::CudaDecoder*> decoders;
  for (int local = 0; local < local_ranks; ++local) {
    const int r = options.first_rank + local;
    const auto start = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(RankWeights weights, request.load_rank(r));
    const CudaRankOptions rank_options{.device = devices[local],
                                       .block_size = options.block_size,
                                       .trace = options.trace,
                                       .max_tokens = options.max_tokens_per_step,
                                       .max_sequences = options.max_sequences_per_step,
                                       .max_context = max_context,
                                       .return_logits = options.return_logits,
                                       .wait_timeout = options.collective_timeout,
                                       .cuda_graphs = options.cuda_graphs,
                                       .graph_max_batch = options.cuda_graph_max_batch,
                                       .fault = options.fault,
                                       .log = log};
    ASSIGN_OR_RETURN(auto decoder, CudaDecoder::Create(config, weights, std::move(comms[local]), rank_options));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    char line[160];
    std::snprintf(line, sizeof(line),
                  "rank %d on cuda:%d: %.2f GiB of weights loaded in %.2f s; %.2f GiB of step buffers for %d tokens, "
                  "%d sequences, context %d",
                  r, devices[local], decoder->weight_bytes() / kGiB, seconds, decoder->step_buffer_bytes() / kGiB,
                  options.max_tokens_per_step, options.max_sequences_per_step, max_context);
    log(line);
    decoders.push_back(decoder.get());
    group.ranks.push_back(std::move(decoder));
  }

  // The communicators' own buffers (NCCL's are made at the first collective) before the KV cache
  // is sized: every local rank runs the largest collectives once, each on its own thread.
  RETURN_IF_ERROR(WarmUpCollectives(decoders));

  // KV blocks: what was asked for, or what the memory budget leaves on the fullest GPU.
  const RankShape& shape = group.ranks[0]->shape();
  const size_t block_bytes = RankKvCache::BytesPerBlock(config.num_layers, options.block_size, shape.kv_heads,
                                                        config.head_dim);
  if (options.kv_cache_blocks > 0) {
    group.kv_blocks = options.kv_cache_blocks;
  } else if (options.kv_cache_bytes > 0) {
    group.kv_blocks = static_cast<int>(options.kv_cache_bytes / (block_bytes * options.tp));
    if (group.kv_blocks < 1) return InvalidArgument("--kv-cache-mb holds no KV block");
  } else {
    std::map<int, GpuMemory> per_device;  // measured after every rank's weights are there
    for (int device : devices) {
      auto [it, inserted] = per_device.try_emplace(device, GpuMemory{.device = device, .ranks = 0});
      ++it->second.ranks;
      if (!inserted) continue;
      RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), "cudaSetDevice"));
      RETURN_IF_ERROR(CudaStatus(cudaMemGetInfo(&it->second.free_bytes, &it->second.total_bytes), "cudaMemGetInfo"));
    }
    std::vector<GpuMemory> gpus;
    for (auto& [device, gpu] : per_device) {
      LogMemorySplit(gpu, devices, decoders, options.gpu_memory_utilization, log);
      gpus.push_back(gpu);
    }
    ASSIGN_OR_RETURN(group.kv_blocks, KvBlocksForMemory(gpus, options.gpu_memory_utilization, block_bytes));
  }
  for (CudaDecoder* decoder : decoders) RETURN_IF_ERROR(decoder->AllocateKvCache(group.kv_blocks));
  char line[160];
  std::snprintf(line, sizeof(line), "KV cache: %d blocks of %d tokens per rank (%.2f GiB per rank)", group.kv_blocks,
                options.block_size, static_cast<double>(block_bytes) * group.kv_blocks / 1073741824.0);
  log(line);
  return group;
}

}  // namespace
}  // namespace tpserve::cuda

extern "C" {

__attribute__((visibility("default"))) int tpserve_cuda_abi() { return tpserve::kCudaModuleAbi; }

__attribute__((visibility("default"))) void tpserve_cuda_create_group(const tpserve::CudaGroupRequest* request,
                                                                      tpserve::Result<tpserve::CudaGroup>* reply) {
  *reply = tpserve::cuda::CreateGroup(*request);
}

static_assert(sizeof(ncclUniqueId) == tpserve::kNcclUniqueIdBytes, "engine/cuda/module_api.h's kNcclUniqueIdBytes");

__attribute__((visibility("default"))) void tpserve_cuda_nccl_unique_id(tpserve::Result<std::string>* reply) {
  *reply = tpserve::cuda::NewNcclUniqueId();
}

__attribute__((visibility("default"))) void tpserve_cuda_comm_bench(
    const tpserve::DeviceCommBenchRequest* request, tpserve::Result<tpserve::DeviceCommBenchReply>* reply) {
  *reply = tpserve::cuda::RunDeviceCommBench(*request);
}

__attribute__((visibility("default"))) void tpserve_cuda_read_bandwidth(int device, size_t bytes,
                                                                        tpserve::Result<double>* reply) {
  tpserve::Status set = tpserve::cuda::CudaStatus(cudaSetDevice(device), "cudaSetDevice");
  *reply = set.ok() ? tpserve::cuda::MeasureReadBandwidth(bytes, 5) : tpserve::Result<double>(set);
}

}  // extern "C"
