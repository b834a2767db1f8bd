// Collectives for a group whose ranks are spread over several processes with several ranks in
// each (`--nnodes 2 --tp 8`: two members of four ranks). Ranks that share a process meet in memory
// through an in-process group, and only the first of them talks to the other processes, through one
// communicator whose ranks are the members (Gloo between processes; anything that implements
// comm/communicator.h). Member m runs global ranks [m * L, (m + 1) * L), so a gather across members
// of each member's L contiguous buffers is already in global rank order, and every sum is still
// taken in rank order: N members × L ranks give bitwise what TP = N·L gives in one process.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "comm/communicator.h"

namespace tpserve {

struct HierarchicalCommunicatorMember;

class HierarchicalCommunicator final : public Communicator {
 public:
  // One communicator per local rank (global ranks across->rank() * local_ranks + i). `across`:
  // the member-level communicator, used by local rank 0 only. `timeout`: the local waits' (as in
  // InProcessCommunicator::CreateGroup; 0: none).
  static std::vector<std::unique_ptr<Communicator>> CreateGroup(std::unique_ptr<Communicator> across,
                                                                int local_ranks, std::chrono::milliseconds timeout);
  ~HierarchicalCommunicator() override;

  int rank() const override { return global_rank_; }
  int world_size() const override { return world_size_; }

  Status AllReduceSum(float* data, size_t count) override;
  Status AllGather(const float* input, float* output, size_t count) override;
  Status ReduceScatterSum(const float* input, float* output, size_t count) override;
  Status Broadcast(float* data, size_t count, int root) override;
  Status Barrier() override;
  void Abort() override;

 private:
  using Member = HierarchicalCommunicatorMember;  // what the member's ranks share
  HierarchicalCommunicator(std::shared_ptr<Member> member, std::unique_ptr<Communicator> local, int local_rank);
  // Every local rank publishes `input`; local rank 0 runs `across_step` (which reads the inputs and
  // talks to the other members); then every rank sees its status. Two local barriers.
  template <typename AcrossStep>
  Status Exchange(const float* input, AcrossStep&& across_step);

  std::shared_ptr<Member> member_;
  std::unique_ptr<Communicator> local_;  // in-process, among this member's ranks
  int local_rank_, global_rank_, world_size_;
};

}  // namespace tpserve
