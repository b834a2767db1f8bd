// NCCL communicators, one GPU per rank: the DeviceCommunicator the CUDA backend uses whenever every
// rank has its own GPU — all ranks in this process (ncclCommInitAll), or this process's share of a
// group that spans processes and nodes (ncclCommInitRank from the leader's unique id). Module-internal.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/device_communicator.h"

namespace tpserve::cuda {

// "2.28.3", from ncclGetVersion.
std::string NcclVersion();

// One communicator per entry of `devices` (CUDA device ordinals, all different), rank r on devices[r].
Result<std::vector<std::unique_ptr<DeviceCommunicator>>> CreateNcclGroup(const std::vector<int>& devices);

// This process's ranks of a group of `world` ranks over several processes: global rank
// first_rank + i on devices[i], joined through `unique_id` (ncclGetUniqueId's bytes on the
// leader, handed to every process by the rendezvous). Blocks until every process has joined.
Result<std::vector<std::unique_ptr<DeviceCommunicator>>> JoinNcclGroup(const std::vector<int>& devices, int first_rank,
                                                                       int world, const std::string& unique_id);

// ncclGetUniqueId's bytes (no GPU needed).
Result<std::string> NewNcclUniqueId();

// Device buffers registered with every rank's NCCL communicator as symmetric windows
// (ncclCommWindowRegister with NCCL_WIN_COLL_SYMMETRIC, NCCL >= 2.27), so that NCCL's symmetric
// kernels may run collectives on them: allocated with ncclMemAlloc (windows need CUDA VMM memory),
// each buffer registered by all ranks together (one NCCL group: the registration is collective),
// deregistered and freed on destruction. Whether the symmetric kernels then run is NCCL's choice;
// its debug output says (benchmarks/nccl_tuning_log.h).
class SymmetricWindows {
 public:
  virtual ~SymmetricWindows() = default;
  // Buffer `index` of `rank` (f32 view; `bytes` each).
  virtual float* buffer(int rank, int index) const = 0;
};

// `comms`: the group's NCCL communicators in rank order, rank r on devices[r].
Result<std::unique_ptr<SymmetricWindows>> RegisterSymmetricWindows(const std::vector<DeviceCommunicator*>& comms,
                                                                   const std::vector<int>& devices, size_t bytes,
                                                                   int buffers_per_rank);

}  // namespace tpserve::cuda
