// The one-shot AllReduce: every rank of this process copies its input into a buffer registered
// once, tells its peers through per-call flags in GPU memory (no host barrier: the collective is
// one kernel, so CUDA graphs can capture it), then reads every peer's buffer directly and sums
// them in rank order, ((r0 + r1) + r2) + ..., the same order as the rank-order communicator, so
// decode is bitwise batch-invariant across GPUs. A second flag round keeps a rank from refilling
// its buffer while a peer still reads it. One kernel launch and two flag round trips replace
// NCCL's protocol: the small messages of decode (16-64 KiB) are latency, not bandwidth
// (../shared/ANCHORS.md).
//
// Needs peer access between every pair of GPUs (NVLink, or PCIe P2P); ranks may share a GPU (the
// test placement). AllGather works the same way (each rank copies every peer's buffer). Messages
// over `capacity_bytes` go to the fallback communicator (NCCL, or rank-order for ranks sharing a
// GPU). A rank that waits longer than
// `timeout` for a peer breaks the group: AsyncError reports who waited for whom. Module-internal.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include "comm/device_communicator.h"

namespace tpserve::cuda {

struct OneShotOptions {
  size_t capacity_bytes = 16u << 20;         // the largest message summed one-shot, per rank
  std::chrono::milliseconds timeout{60000};  // the longest a rank's kernel waits for a peer
};

// Ok when every pair of distinct GPUs in `devices` can access each other's memory; otherwise
// Unavailable naming the first pair that cannot (a PCIe box without P2P).
Status CheckPeerAccess(const std::vector<int>& devices);

// Rank r on devices[r] (CUDA ordinals; repeats allowed), with fallback[r] for what one-shot does
// not take. Enables peer access and allocates each rank's buffer and flags once.
Result<std::vector<std::unique_ptr<DeviceCommunicator>>> CreateOneShotGroup(
    const std::vector<int>& devices, std::vector<std::unique_ptr<DeviceCommunicator>> fallback,
    const OneShotOptions& options);

// Loads the one-shot kernels now (kernels/cuda/preload.cuh says why).
Status PreloadOneShotKernels();

}  // namespace tpserve::cuda
