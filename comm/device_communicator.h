// The device form of comm/communicator.h: collectives over buffers in GPU memory, enqueued on a
// stream. No CUDA headers: buffers are device pointers and `stream` is a cudaStream_t.
// Implementations live in the CUDA module (comm/cuda/): NCCL (one GPU per rank), the
// rank-order communicator (ranks sharing one GPU, the test placement) and the one-shot
// communicator (each rank reads its peers' buffers directly; small messages).
//
// Ordering: NCCL picks its algorithm (ring, tree, NVLS) and its chunking by message size, so the
// order in which it adds the ranks' values can change with the batch; the rank-order and one-shot
// communicators add ((r0 + r1) + r2) + ... for every element, as the CPU communicator does
// (docs/ARCHITECTURE.md, "Determinism on the GPU").
#pragma once

#include <cstddef>
#include <string>

#include "common/status.h"

namespace tpserve {

enum class DeviceDtype { kF32, kBf16 };

inline size_t DeviceDtypeBytes(DeviceDtype dtype) { return dtype == DeviceDtype::kF32 ? 4 : 2; }

class DeviceCommunicator {
 public:
  virtual ~DeviceCommunicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string name() const = 0;  // "nccl 2.28.3", "rank-order"

  // data: [count] on every rank; afterwards every rank holds the sum. Enqueued on `stream`.
  virtual Status AllReduceSum(void* data, size_t count, DeviceDtype dtype, void* stream) = 0;
  // input: [count] per rank; output: [world_size * count], rank r's input at offset r * count.
  virtual Status AllGather(const void* input, void* output, size_t count, DeviceDtype dtype, void* stream) = 0;
  // The AllReduce of a row-parallel output fused with the residual add and RMSNorm that follow it
  // (the one-shot communicator, as TensorRT-LLM and FlashInfer fuse them), row by row:
  //   residual += AllReduceSum(partial); y = residual / sqrt(mean(residual²) + eps) * weight.
  //   partial, residual, y: [rows, n] f32; weight: [n] f32.
  // The same bits as AllReduceSum followed by cuda::AddRmsNorm. Only where FusesAddRmsNorm(rows * n).
  virtual bool FusesAddRmsNorm(size_t /*count*/) const { return false; }
  virtual Status AllReduceAddRmsNorm(const float* /*partial*/, float* /*residual*/, const float* /*weight*/,
                                     float* /*y*/, int /*rows*/, int /*n*/, float /*eps*/, void* /*stream*/) {
    return Unimplemented(name() + " does not fuse the residual add and RMSNorm into its AllReduce");
  }
  // Whether a CUDA graph can capture this communicator's AllReduces of `reduce_bytes` and
  // AllGathers of `gather_bytes` (no host synchronisation inside the calls).
  virtual bool CanCapture(size_t /*reduce_bytes*/, size_t /*gather_bytes*/) const { return true; }
  // Whether the communicator has failed asynchronously (NCCL's ncclCommGetAsyncError); Ok while
  // healthy. Called while a rank waits for its stream, so that a broken peer is seen.
  virtual Status AsyncError() = 0;
  // Stops every operation in flight and makes later calls fail (a hung or failed group).
  virtual void Abort() = 0;
};

}  // namespace tpserve
