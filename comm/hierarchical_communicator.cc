#include "comm/hierarchical_communicator.h"

#include <algorithm>
#include <cstring>

#include "comm/in_process_communicator.h"
#include "comm/rank_order_sum.h"

namespace tpserve {

// What the ranks of one member share (HierarchicalCommunicator::Member).
struct HierarchicalCommunicatorMember {
  std::unique_ptr<Communicator> across;  // ranks = members; local rank 0's
  int local_ranks = 1;
  std::vector<const float*> inputs;  // [local_ranks], published for one call
  std::vector<float> staging;        // [local_ranks, n]: this member's inputs, contiguous
  std::vector<float> gathered;       // [world, n]: every rank's input, global rank order
  std::vector<float> result;         // what every local rank copies out
  Status status;                     // local rank 0's, for the others
};

std::vector<std::unique_ptr<Communicator>> HierarchicalCommunicator::CreateGroup(std::unique_ptr<Communicator> across,
                                                                                 int local_ranks,
                                                                                 std::chrono::milliseconds timeout) {
  auto member = std::make_shared<Member>();
  member->across = std::move(across);
  member->local_ranks = local_ranks;
  member->inputs.resize(local_ranks);
  std::vector<std::unique_ptr<Communicator>> ranks;
  auto locals = InProcessCommunicator::CreateGroup(local_ranks, timeout);
  for (int i = 0; i < local_ranks; ++i) {
    ranks.emplace_back(new HierarchicalCommunicator(member, std::move(locals[i]), i));
  }
  return ranks;
}

HierarchicalCommunicator::HierarchicalCommunicator(std::shared_ptr<Member> member, std::unique_ptr<Communicator> local,
                                                   int local_rank)
    : member_(std::move(member)),
      local_(std::move(local)),
      local_rank_(local_rank),
      global_rank_(member_->across->rank() * member_->local_ranks + local_rank),
      world_size_(member_->across->world_size() * member_->local_ranks) {}

HierarchicalCommunicator::~HierarchicalCommunicator() = default;

template <typename AcrossStep>
Status HierarchicalCommunicator::Exchange(const float* input, AcrossStep&& across_step) {
  Member& m = *member_;
  m.inputs[local_rank_] = input;
  RETURN_IF_ERROR(local_->Barrier());  // every local input is published
  // Rank 0 writes the member's buffers and status only here, between the two barriers: the others
  // read them after the second one and are done before anyone passes the next call's first.
  if (local_rank_ == 0) m.status = across_step(m);
  RETURN_IF_ERROR(local_->Barrier());
  return m.status;
}

namespace {

// [local_ranks, n]: the member's inputs, in local rank order.
void Stage(const std::vector<const float*>& inputs, size_t n, std::vector<float>* staging) {
  staging->resize(inputs.size() * n);
  if (n == 0) return;  // memcpy must not see the null pointers of empty buffers
  for (size_t i = 0; i < inputs.size(); ++i) std::memcpy(staging->data() + i * n, inputs[i], n * sizeof(float));
}

// Local rank 0's step of the gathers: the member's inputs of n elements each, contiguous, then
// gathered across members into m.gathered ([world, n], global rank order).
Status GatherAcross(HierarchicalCommunicatorMember& m, size_t n) {
  Stage(m.inputs, n, &m.staging);
  m.gathered.resize(static_cast<size_t>(m.across->world_size()) * m.local_ranks * n);
  return m.across->AllGather(m.staging.data(), m.gathered.data(), m.staging.size());
}

}  // namespace

Status HierarchicalCommunicator::AllReduceSum(float* data, size_t count) {
  RETURN_IF_ERROR(Exchange(data, [&](Member& m) {
    RETURN_IF_ERROR(GatherAcross(m, count));
    m.result.resize(count);
    SumChunksInRankOrder(m.gathered.data(), world_size_, count, count, m.result.data());
    return Status::Ok();
  }));
  if (count > 0) std::memcpy(data, member_->result.data(), count * sizeof(float));
  return Status::Ok();
}

Status HierarchicalCommunicator::AllGather(const float* input, float* output, size_t count) {
  RETURN_IF_ERROR(Exchange(input, [&](Member& m) { return GatherAcross(m, count); }));
  if (count > 0) std::memcpy(output, member_->gathered.data(), static_cast<size_t>(world_size_) * count * sizeof(float));
  return Status::Ok();
}

Status HierarchicalCommunicator::ReduceScatterSum(const float* input, float* output, size_t count) {
  const size_t per_rank = static_cast<size_t>(world_size_) * count;  // each rank's whole input
  RETURN_IF_ERROR(Exchange(input, [&](Member& m) { return GatherAcross(m, per_rank); }));
  // Chunk `rank` of every rank's input, summed in rank order.
  SumChunksInRankOrder(member_->gathered.data() + static_cast<size_t>(global_rank_) * count, world_size_, per_rank,
                       count, output);
  return Status::Ok();
}

Status HierarchicalCommunicator::Broadcast(float* data, size_t count, int root) {
  if (root < 0 || root >= world_size_) return InvalidArgument("Broadcast root " + std::to_string(root) + " is not a rank");
  RETURN_IF_ERROR(Exchange(data, [&](Member& m) {
    const int root_member = root / m.local_ranks;
    m.result.resize(count);
    if (root_member == m.across->rank()) {
      if (count > 0) std::memcpy(m.result.data(), m.inputs[root % m.local_ranks], count * sizeof(float));
    }
    return m.across->Broadcast(m.result.data(), count, root_member);
  }));
  if (global_rank_ != root && count > 0) std::memcpy(data, member_->result.data(), count * sizeof(float));
  return Status::Ok();
}

Status HierarchicalCommunicator::Barrier() {
  RETURN_IF_ERROR(Exchange(nullptr, [](Member& m) { return m.across->Barrier(); }));
  return Status::Ok();
}

void HierarchicalCommunicator::Abort() {
  local_->Abort();
  if (local_rank_ == 0) member_->across->Abort();
}

}  // namespace tpserve
