#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cuda/atomic>
#include <string>

#include "comm/cuda/oneshot_communicator.h"
#include "comm/cuda/rank_order_sum.cuh"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/preload.cuh"
#include "kernels/cuda/row_norm.cuh"

namespace tpserve::cuda {
namespace {

constexpr int kMaxRanks = kMaxCollectiveRanks;
constexpr int kMaxBlocks = 32;            // per rank and call: ranks × blocks stay co-resident
constexpr int kThreads = kNormThreads;    // the fused norm's reduction tree needs exactly this
constexpr size_t kElementsPerThread = 4;  // below this per block, fewer blocks
constexpr uint32_t kAbortedCode = 0xffffffffu;

enum Phase { kInputsWritten = 0, kPeersRead = 1 };

// Each rank's flags, in its own GPU memory; peers write them. flag[phase][block][peer] holds the
// number of the last call in which `peer`'s block `block` passed `phase`. epoch[block]: the number
// of calls this rank's block `block` has finished.
struct Signals {
  uint32_t flag[2][kMaxBlocks][kMaxRanks];
  uint32_t epoch[kMaxBlocks];
};

// What every rank's kernel needs, fixed at creation (so a captured graph replays it unchanged).
struct Peers {
  void* buffers[kMaxRanks];     // each rank's registered buffer, [capacity] bytes
  Signals* signals[kMaxRanks];  // each rank's flags
  uint32_t* error;              // host-mapped: 0, (waiter + 1) << 16 | (peer + 1), or kAbortedCode
  uint64_t timeout_ns;
  int rank, ranks;
};

__device__ uint64_t GlobalNanoseconds() {
  uint64_t ns;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  return ns;
}

// Every peer's block `block` reached `phase` of call `epoch`. Thread p < ranks signals peer p and
// waits for it; the host-mapped error word (a PCIe read) is looked at only every 1024 spins. False
// when the group is broken (a timeout here or elsewhere, or Abort).
__device__ bool Barrier(const Peers& p, int block, Phase phase, uint32_t epoch) {
  __shared__ int broken;
  if (threadIdx.x == 0) broken = 0;
  __syncthreads();  // the block's writes happen before thread `peer`'s release below
  const int peer = threadIdx.x;
  if (peer < p.ranks) {
    __threadfence_system();
    ::cuda::atomic_ref<uint32_t, ::cuda::thread_scope_system> theirs(
        p.signals[peer]->flag[phase][block][p.rank]);
    theirs.store(epoch, ::cuda::memory_order_release);
    ::cuda::atomic_ref<uint32_t, ::cuda::thread_scope_system> mine(
        p.signals[p.rank]->flag[phase][block][peer]);
    ::cuda::atomic_ref<uint32_t, ::cuda::thread_scope_system> error(*p.error);
    const uint64_t start = GlobalNanoseconds();
    for (uint32_t spins = 1; mine.load(::cuda::memory_order_acquire) < epoch; ++spins) {
      if (spins % 1024 != 0) continue;
      if (error.load(::cuda::memory_order_relaxed) != 0) {
        broken = 1;
        break;
      }
      if (GlobalNanoseconds() - start > p.timeout_ns) {
        uint32_t none = 0;
        error.compare_exchange_strong(none, (static_cast<uint32_t>(p.rank) + 1) << 16 | (peer + 1));
        broken = 1;
        break;
      }
    }
  }
  __syncthreads();
  return broken == 0;
}

__device__ PeerInputs BuffersOf(const Peers& p) {
  PeerInputs inputs{};
  for (int r = 0; r < p.ranks; ++r) inputs.data[r] = p.buffers[r];
  return inputs;
}

// The element-wise collectives, [count] elements split into gridDim.x ranges: block b publishes
// its range of `input` in this rank's buffer, meets its peers, calls read(i) for every element i of
// its range, and meets them again before its buffer may be refilled.
template <typename T, typename Read>
__device__ void OverRanges(const Peers& p, const T* input, size_t count, Read read) {
  const int block = blockIdx.x;
  const uint32_t epoch = p.signals[p.rank]->epoch[block] + 1;
  const size_t per_block = (count + gridDim.x - 1) / gridDim.x;
  const size_t begin = block * per_block < count ? block * per_block : count;
  const size_t end = begin + per_block < count ? begin + per_block : count;
  T* mine = static_cast<T*>(p.buffers[p.rank]);
  for (size_t i = begin + threadIdx.x; i < end; i += kThreads) mine[i] = input[i];
  if (!Barrier(p, block, kInputsWritten, epoch)) return;
  for (size_t i = begin + threadIdx.x; i < end; i += kThreads) read(i);
  if (!Barrier(p, block, kPeersRead, epoch)) return;
  if (threadIdx.x == 0) p.signals[p.rank]->epoch[block] = epoch;
}

// out[i] = the rank-order sum of every rank's input[i].
template <typename T>
__global__ void __launch_bounds__(kThreads)
    OneShotAllReduceKernel(Peers p, const T* input, T* out, size_t count) {
  const PeerInputs inputs = BuffersOf(p);
  OverRanges(p, input, count,
             [&](size_t i) { out[i] = static_cast<T>(RankOrderSum<T>(inputs, p.ranks, i)); });
}

// out[r * count + i] = rank r's input[i].
template <typename T>
__global__ void __launch_bounds__(kThreads)
    OneShotAllGatherKernel(Peers p, const T* input, T* out, size_t count) {
  OverRanges(p, input, count, [&](size_t i) {
    for (int r = 0; r < p.ranks; ++r) out[r * count + i] = static_cast<const T*>(p.buffers[r])[i];
  });
}

// The fused form, rows split over blocks: residual += sum; y = RmsNorm(residual) * weight, each
// row exactly as cuda::AddRmsNorm computes it.
__global__ void __launch_bounds__(kThreads)
    OneShotAddRmsNormKernel(Peers p, const float* partial, float* residual, const float* weight,
                            float* y, int rows, int n, float eps) {
  const int block = blockIdx.x;
  const uint32_t epoch = p.signals[p.rank]->epoch[block] + 1;
  float* mine = static_cast<float*>(p.buffers[p.rank]);
  for (int row = block; row < rows; row += gridDim.x) {
    const size_t offset = static_cast<size_t>(row) * n;
    for (int i = threadIdx.x; i < n; i += kThreads) mine[offset + i] = partial[offset + i];
  }
  if (!Barrier(p, block, kInputsWritten, epoch)) return;
  const PeerInputs inputs = BuffersOf(p);
  for (int row = block; row < rows; row += gridDim.x) {
    const size_t offset = static_cast<size_t>(row) * n;
    float* r = residual + offset;
    for (int i = threadIdx.x; i < n; i += kThreads)
      r[i] += RankOrderSum<float>(inputs, p.ranks, offset + i);
    __syncthreads();
    ScaleRow(r, weight, y + offset, n, RowSumOfSquares(r, n), eps);
  }
  if (!Barrier(p, block, kPeersRead, epoch)) return;
  if (threadIdx.x == 0) p.signals[p.rank]->epoch[block] = epoch;
}

// The allocations of the whole group, freed when the last rank goes.
struct Group {
  ~Group() {
    for (size_t r = 0; r < devices.size(); ++r) {
      cudaSetDevice(devices[r]);
      if (buffers[r] != nullptr) cudaFree(buffers[r]);
      if (signals[r] != nullptr) cudaFree(signals[r]);
    }
    if (error != nullptr) cudaFreeHost(error);
  }
  std::vector<int> devices;
  std::vector<void*> buffers;
  std::vector<Signals*> signals;
  uint32_t* error = nullptr;
  size_t capacity = 0;
  std::chrono::milliseconds timeout{0};
};

class OneShotCommunicator final : public DeviceCommunicator {
 public:
  OneShotCommunicator(std::shared_ptr<Group> group, int rank,
                      std::unique_ptr<DeviceCommunicator> fallback)
      : group_(std::move(group)), fallback_(std::move(fallback)) {
    const int ranks = static_cast<int>(group_->devices.size());
    peers_.rank = rank;
    peers_.ranks = ranks;
    peers_.error = group_->error;
    peers_.timeout_ns = static_cast<uint64_t>(group_->timeout.count()) * 1000000u;
    for (int r = 0; r < ranks; ++r) {
      peers_.buffers[r] = group_->buffers[r];
      peers_.signals[r] = group_->signals[r];
    }
  }

  int rank() const override { return peers_.rank; }
  int world_size() const override { return peers_.ranks; }
  std::string name() const override { return "oneshot (over " + fallback_->name() + ")"; }

  Status AllReduceSum(void* data, size_t count, DeviceDtype dtype, void* stream) override {
    RETURN_IF_ERROR(Healthy());
    if (count * DeviceDtypeBytes(dtype) > group_->capacity)
      return fallback_->AllReduceSum(data, count, dtype, stream);
    if (count == 0) return Status::Ok();
    const unsigned blocks = BlocksFor(count);
    auto s = static_cast<cudaStream_t>(stream);
    if (dtype == DeviceDtype::kF32) {
      OneShotAllReduceKernel<float><<<blocks, kThreads, 0, s>>>(
          peers_, static_cast<const float*>(data), static_cast<float*>(data), count);
    } else {
      OneShotAllReduceKernel<__nv_bfloat16>
          <<<blocks, kThreads, 0, s>>>(peers_, static_cast<const __nv_bfloat16*>(data),
                                       static_cast<__nv_bfloat16*>(data), count);
    }
    return LaunchStatus("one-shot AllReduce");
  }

  Status AllGather(const void* input, void* output, size_t count, DeviceDtype dtype,
                   void* stream) override {
    RETURN_IF_ERROR(Healthy());
    if (count * DeviceDtypeBytes(dtype) > group_->capacity) {
      return fallback_->AllGather(input, output, count, dtype, stream);
    }
    if (count == 0) return Status::Ok();
    const unsigned blocks = BlocksFor(count);
    auto s = static_cast<cudaStream_t>(stream);
    if (dtype == DeviceDtype::kF32) {
      OneShotAllGatherKernel<float><<<blocks, kThreads, 0, s>>>(
          peers_, static_cast<const float*>(input), static_cast<float*>(output), count);
    } else {
      OneShotAllGatherKernel<uint16_t><<<blocks, kThreads, 0, s>>>(
          peers_, static_cast<const uint16_t*>(input), static_cast<uint16_t*>(output), count);
    }
    return LaunchStatus("one-shot AllGather");
  }

  bool CanCapture(size_t reduce_bytes, size_t gather_bytes) const override {
    const bool fits = reduce_bytes <= group_->capacity && gather_bytes <= group_->capacity;
    return fits || fallback_->CanCapture(reduce_bytes, gather_bytes);
  }

  bool FusesAddRmsNorm(size_t count) const override {
    return count * sizeof(float) <= group_->capacity;
  }

  Status AllReduceAddRmsNorm(const float* partial, float* residual, const float* weight, float* y,
                             int rows, int n, float eps, void* stream) override {
    RETURN_IF_ERROR(Healthy());
    if (!FusesAddRmsNorm(static_cast<size_t>(rows) * n)) {
      return InvalidArgument("one-shot AllReduce + RMSNorm of " + std::to_string(rows) +
                             " rows of " + std::to_string(n) + " floats exceeds its " +
                             std::to_string(group_->capacity) + "-byte buffer");
    }
    if (rows == 0) return Status::Ok();
    const unsigned blocks = static_cast<unsigned>(std::min(rows, kMaxBlocks));
    OneShotAddRmsNormKernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        peers_, partial, residual, weight, y, rows, n, eps);
    return LaunchStatus("one-shot AllReduce + RMSNorm");
  }

  Status AsyncError() override {
    RETURN_IF_ERROR(Healthy());
    return fallback_->AsyncError();
  }

  void Abort() override {
    ::cuda::atomic_ref<uint32_t, ::cuda::thread_scope_system> error(*group_->error);
    uint32_t none = 0;
    error.compare_exchange_strong(none, kAbortedCode);
    fallback_->Abort();
  }

 private:
  // Ok while no rank of the group has timed out or aborted. A broken group stays broken: after a
  // timeout the ranks' epochs are out of step, and a later call could pass its barriers without
  // its peers and sum stale data, so every later call fails here instead (the error word is host
  // memory: a plain load).
  Status Healthy() const {
    const uint32_t code =
        ::cuda::atomic_ref<uint32_t, ::cuda::thread_scope_system>(*group_->error).load();
    if (code == kAbortedCode)
      return Status(StatusCode::kUnavailable, "one-shot communicator aborted");
    if (code != 0) {
      return Status(StatusCode::kDeadlineExceeded,
                    "one-shot AllReduce: rank " + std::to_string((code >> 16) - 1) +
                        " waited more than " + std::to_string(group_->timeout.count()) +
                        " ms for rank " + std::to_string((code & 0xffff) - 1) +
                        " (a stalled peer); the group is broken");
    }
    return Status::Ok();
  }

  static unsigned BlocksFor(size_t count) {
    const size_t wanted =
        (count + kThreads * kElementsPerThread - 1) / (kThreads * kElementsPerThread);
    return static_cast<unsigned>(std::clamp<size_t>(wanted, 1, kMaxBlocks));
  }

  std::shared_ptr<Group> group_;
  std::unique_ptr<DeviceCommunicator> fallback_;
  Peers peers_{};
};

}  // namespace

Status CheckPeerAccess(const std::vector<int>& devices) {
  for (int a : devices) {
    for (int b : devices) {
      if (a == b) continue;
      int can = 0;
      RETURN_IF_ERROR(CudaStatus(cudaDeviceCanAccessPeer(&can, a, b), "cudaDeviceCanAccessPeer"));
      if (!can) {
        return Status(StatusCode::kUnavailable,
                      "cuda:" + std::to_string(a) + " cannot access the memory of cuda:" +
                          std::to_string(b) + " (no NVLink or PCIe peer-to-peer)");
      }
    }
  }
  return Status::Ok();
}

Result<std::vector<std::unique_ptr<DeviceCommunicator>>> CreateOneShotGroup(
    const std::vector<int>& devices, std::vector<std::unique_ptr<DeviceCommunicator>> fallback,
    const OneShotOptions& options) {
  const int ranks = static_cast<int>(devices.size());
  if (ranks < 1 || ranks > kMaxRanks) {
    return InvalidArgument("the one-shot communicator takes 1 to " + std::to_string(kMaxRanks) +
                           " ranks, got " + std::to_string(ranks));
  }
  if (fallback.size() != devices.size())
    return InvalidArgument("one fallback communicator per rank is needed");
  RETURN_IF_ERROR(CheckPeerAccess(devices));
  auto group = std::make_shared<Group>();
  group->devices = devices;
  group->buffers.assign(ranks, nullptr);
  group->signals.assign(ranks, nullptr);
  group->capacity = options.capacity_bytes;
  group->timeout = options.timeout;
  for (int r = 0; r < ranks; ++r) {
    RETURN_IF_ERROR(CudaStatus(cudaSetDevice(devices[r]), "cudaSetDevice"));
    for (int peer : devices) {
      if (peer == devices[r]) continue;
      const cudaError_t enabled = cudaDeviceEnablePeerAccess(peer, 0);
      if (enabled == cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError();  // clears the sticky "already enabled"
      } else {
        RETURN_IF_ERROR(
            CudaStatus(enabled, "cudaDeviceEnablePeerAccess(cuda:" + std::to_string(devices[r]) +
                                    " -> cuda:" + std::to_string(peer) + ")"));
      }
    }
    const std::string what = "rank " + std::to_string(r) + "'s one-shot ";
    RETURN_IF_ERROR(
        CudaStatus(cudaMalloc(&group->buffers[r], std::max<size_t>(options.capacity_bytes, 16)),
                   what + "buffer (" + std::to_string(options.capacity_bytes) + " bytes)"));
    RETURN_IF_ERROR(CudaStatus(cudaMalloc(&group->signals[r], sizeof(Signals)), what + "flags"));
    RETURN_IF_ERROR(CudaStatus(cudaMemset(group->signals[r], 0, sizeof(Signals)), what + "flags"));
  }
  void* error = nullptr;
  RETURN_IF_ERROR(CudaStatus(
      cudaHostAlloc(&error, sizeof(uint32_t), cudaHostAllocMapped | cudaHostAllocPortable),
      "one-shot error word"));
  group->error = static_cast<uint32_t*>(error);
  *group->error = 0;
  for (int r = 0; r < ranks; ++r) {
    RETURN_IF_ERROR(CudaStatus(cudaSetDevice(devices[r]), "cudaSetDevice"));
    RETURN_IF_ERROR(CudaStatus(cudaDeviceSynchronize(),
                               "one-shot set-up"));  // the flags are zero before any call
  }
  std::vector<std::unique_ptr<DeviceCommunicator>> comms;
  for (int r = 0; r < ranks; ++r)
    comms.push_back(std::make_unique<OneShotCommunicator>(group, r, std::move(fallback[r])));
  return Result<std::vector<std::unique_ptr<DeviceCommunicator>>>(std::move(comms));
}

Status PreloadOneShotKernels() {
  return PreloadKernels("one-shot", OneShotAllReduceKernel<float>, OneShotAllReduceKernel<__nv_bfloat16>,
                        OneShotAllGatherKernel<float>, OneShotAllGatherKernel<uint16_t>, OneShotAddRmsNormKernel);
}

}  // namespace tpserve::cuda
