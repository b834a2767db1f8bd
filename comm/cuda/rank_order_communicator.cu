#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <condition_variable>
#include <mutex>
#include <string>

#include "comm/cuda/rank_order_communicator.h"
#include "comm/cuda/rank_order_sum.cuh"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/preload.cuh"

namespace tpserve::cuda {
namespace {

constexpr int kMaxRanks = kMaxCollectiveRanks;

// out[i] = ((in[0][i] + in[1][i]) + in[2][i]) + ..., accumulated in f32.
template <typename T>
__global__ void RankOrderSumKernel(PeerInputs inputs, int ranks, T* out, size_t count) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  out[i] = static_cast<T>(RankOrderSum<T>(inputs, ranks, i));
}

// What the ranks share: the published buffers and events, and a generational barrier.
struct Shared {
  explicit Shared(int ranks, std::chrono::milliseconds timeout)
      : ranks(ranks), timeout(timeout), inputs(ranks, nullptr), ready(ranks, nullptr), done(ranks, nullptr) {}

  // Returns when every rank has arrived, or an error after `timeout` or once aborted.
  Status Arrive(int rank) {
    std::unique_lock<std::mutex> lock(mutex);
    if (aborted) return Status(StatusCode::kUnavailable, "rank-order communicator aborted");
    const uint64_t generation = barrier_generation;
    if (++arrived == ranks) {
      arrived = 0;
      ++barrier_generation;
      all_arrived.notify_all();
      return Status::Ok();
    }
    if (!all_arrived.wait_for(lock, timeout, [&] { return aborted || barrier_generation != generation; })) {
      aborted = true;  // a peer stalled: fail everyone, now and later
      all_arrived.notify_all();
      return Status(StatusCode::kDeadlineExceeded, "rank-order communicator: rank " + std::to_string(rank) +
                                                       " waited " + std::to_string(timeout.count()) +
                                                       " ms for its peers at a collective");
    }
    if (aborted) return Status(StatusCode::kUnavailable, "rank-order communicator aborted");
    return Status::Ok();
  }

  void Abort() {
    std::lock_guard<std::mutex> lock(mutex);
    aborted = true;
    all_arrived.notify_all();
  }

  const int ranks;
  const std::chrono::milliseconds timeout;
  std::vector<const void*> inputs;  // [ranks] this collective's input of each rank
  std::vector<cudaEvent_t> ready;   // [ranks] recorded after each rank's input was written
  std::vector<cudaEvent_t> done;    // [ranks] recorded after each rank finished reading its peers
  std::mutex mutex;
  std::condition_variable all_arrived;
  int arrived = 0;
  uint64_t barrier_generation = 0;
  bool aborted = false;
};

class RankOrderCommunicator final : public DeviceCommunicator {
 public:
  RankOrderCommunicator(std::shared_ptr<Shared> shared, int rank, int device)
      : shared_(std::move(shared)), rank_(rank), device_(device) {}
  ~RankOrderCommunicator() override {
    if (scratch_ != nullptr) cudaFree(scratch_);
    cudaEventDestroy(shared_->ready[rank_]);
    cudaEventDestroy(shared_->done[rank_]);
  }

  Status Init() {
    RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_), "cudaSetDevice"));
    RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&shared_->ready[rank_], cudaEventDisableTiming), "event"));
    return CudaStatus(cudaEventCreateWithFlags(&shared_->done[rank_], cudaEventDisableTiming), "event");
  }

  int rank() const override { return rank_; }
  int world_size() const override { return shared_->ranks; }
  std::string name() const override { return "rank-order"; }

  Status AllReduceSum(void* data, size_t count, DeviceDtype dtype, void* stream) override {
    const size_t bytes = count * DeviceDtypeBytes(dtype);
    RETURN_IF_ERROR(EnsureScratch(bytes));
    auto s = static_cast<cudaStream_t>(stream);
    RETURN_IF_ERROR(Exchange(data, s));
    PeerInputs inputs{};
    for (int r = 0; r < shared_->ranks; ++r) inputs.data[r] = shared_->inputs[r];
    const unsigned blocks = static_cast<unsigned>((count + 255) / 256);
    if (count > 0 && dtype == DeviceDtype::kF32) {
      RankOrderSumKernel<float><<<blocks, 256, 0, s>>>(inputs, shared_->ranks, static_cast<float*>(scratch_), count);
    } else if (count > 0) {
      RankOrderSumKernel<__nv_bfloat16>
          <<<blocks, 256, 0, s>>>(inputs, shared_->ranks, static_cast<__nv_bfloat16*>(scratch_), count);
    }
    RETURN_IF_ERROR(CudaStatus(cudaGetLastError(), "rank-order sum"));
    RETURN_IF_ERROR(FinishReading(s));
    return CudaStatus(cudaMemcpyAsync(data, scratch_, bytes, cudaMemcpyDeviceToDevice, s), "rank-order copy");
  }

  Status AllGather(const void* input, void* output, size_t count, DeviceDtype dtype, void* stream) override {
    const size_t bytes = count * DeviceDtypeBytes(dtype);
    auto s = static_cast<cudaStream_t>(stream);
    RETURN_IF_ERROR(Exchange(input, s));
    for (int r = 0; r < shared_->ranks; ++r) {
      RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(static_cast<char*>(output) + r * bytes, shared_->inputs[r], bytes,
                                                 cudaMemcpyDeviceToDevice, s),
                                 "rank-order gather"));
    }
    return FinishReading(s);
  }

  // Its host barriers cannot be captured.
  bool CanCapture(size_t, size_t) const override { return false; }
  Status AsyncError() override { return Status::Ok(); }  // failures surface at the barriers
  void Abort() override { shared_->Abort(); }

 private:
  Status EnsureScratch(size_t bytes) {
    if (bytes <= scratch_bytes_) return Status::Ok();
    if (scratch_ != nullptr) cudaFree(scratch_);
    scratch_ = nullptr;
    RETURN_IF_ERROR(CudaStatus(cudaMalloc(&scratch_, bytes), "rank-order scratch of " + std::to_string(bytes) + " bytes"));
    scratch_bytes_ = bytes;
    return Status::Ok();
  }

  // Publishes this rank's input, meets the peers, and makes the stream wait until every peer's
  // input is written.
  Status Exchange(const void* input, cudaStream_t stream) {
    shared_->inputs[rank_] = input;
    RETURN_IF_ERROR(CudaStatus(cudaEventRecord(shared_->ready[rank_], stream), "ready event"));
    RETURN_IF_ERROR(shared_->Arrive(rank_));
    for (int r = 0; r < shared_->ranks; ++r) {
      if (r != rank_) RETURN_IF_ERROR(CudaStatus(cudaStreamWaitEvent(stream, shared_->ready[r], 0), "wait ready"));
    }
    return Status::Ok();
  }

  // Makes the stream wait until every peer has read this rank's input, before anything overwrites it.
  Status FinishReading(cudaStream_t stream) {
    RETURN_IF_ERROR(CudaStatus(cudaEventRecord(shared_->done[rank_], stream), "done event"));
    RETURN_IF_ERROR(shared_->Arrive(rank_));
    for (int r = 0; r < shared_->ranks; ++r) {
      if (r != rank_) RETURN_IF_ERROR(CudaStatus(cudaStreamWaitEvent(stream, shared_->done[r], 0), "wait done"));
    }
    return Status::Ok();
  }

  std::shared_ptr<Shared> shared_;
  int rank_, device_;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
};

}  // namespace

Result<std::vector<std::unique_ptr<DeviceCommunicator>>> CreateRankOrderGroup(int ranks, int device,
                                                                              std::chrono::milliseconds timeout) {
  if (ranks < 1 || ranks > kMaxRanks) {
    return InvalidArgument("the rank-order communicator takes 1 to " + std::to_string(kMaxRanks) + " ranks, got " +
                           std::to_string(ranks));
  }
  auto shared = std::make_shared<Shared>(ranks, timeout);
  std::vector<std::unique_ptr<DeviceCommunicator>> group;
  for (int r = 0; r < ranks; ++r) {
    auto comm = std::make_unique<RankOrderCommunicator>(shared, r, device);
    RETURN_IF_ERROR(comm->Init());
    group.push_back(std::move(comm));
  }
  return Result<std::vector<std::unique_ptr<DeviceCommunicator>>>(std::move(group));
}

Status PreloadRankOrderKernels() {
  return PreloadKernels("rank-order sum", RankOrderSumKernel<float>, RankOrderSumKernel<__nv_bfloat16>);
}

}  // namespace tpserve::cuda
