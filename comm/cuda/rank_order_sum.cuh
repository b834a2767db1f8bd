// The rank-order sum of one element over every rank's buffer, ((r0 + r1) + r2) + ..., accumulated
// in f32: the same order as the CPU communicator (comm/rank_order_sum.h). Shared by the rank-order
// communicator (ranks sharing a GPU) and the one-shot AllReduce (ranks reading their peers'
// buffers), so that both give the same bits. Device code: include from .cu files only.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>

namespace tpserve::cuda {

inline constexpr int kMaxCollectiveRanks = 8;

// Each rank's input of one collective, [count] elements of T each.
struct PeerInputs {
  const void* data[kMaxCollectiveRanks];
};

template <typename T>
__device__ inline float RankOrderSum(const PeerInputs& inputs, int ranks, size_t i) {
  float sum = static_cast<float>(static_cast<const T*>(inputs.data[0])[i]);
  for (int r = 1; r < ranks; ++r)
    sum += static_cast<float>(static_cast<const T*>(inputs.data[r])[i]);
  return sum;
}

}  // namespace tpserve::cuda
