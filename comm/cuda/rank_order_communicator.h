// Ranks that share one GPU (the test placement, `--share-gpu`; NCCL refuses two ranks on one
// device): each rank's stream waits for its peers' buffers, then every rank sums all of them in
// rank order, ((r0 + r1) + r2) + ..., into its own. Host threads meet at a barrier twice per
// collective (to exchange buffers and events, then to know every peer has finished reading), and
// every wait has a timeout, so a stalled rank fails its peers instead of hanging them.
// Module-internal.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "comm/device_communicator.h"

namespace tpserve::cuda {

// `device`: the GPU every rank uses; `timeout`: the longest a rank waits for its peers at a barrier.
Result<std::vector<std::unique_ptr<DeviceCommunicator>>> CreateRankOrderGroup(int ranks, int device,
                                                                              std::chrono::milliseconds timeout);

// Loads the rank-order sum kernels now (kernels/cuda/preload.cuh says why).
Status PreloadRankOrderKernels();

}  // namespace tpserve::cuda
