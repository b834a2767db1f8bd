// The members of a tensor-parallel group that spans processes (GroupMembership): they meet at the
// leader's rendezvous, check that each loaded the same model, shapes and flags (a mismatch is a
// clear error on every member), connect one Gloo communicator per rank, and keep a control channel
// on which the leader sends each step's plan (step_plan_wire) and, at the end, a shutdown.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/group_membership.h"
#include "common/status.h"
#include "engine/step/step_plan.h"

namespace tpserve {

class ProcessGroup {
 public:
  // `fingerprint`: what must be equal on every member (model shape, TP, KV blocks, kernels).
  // `bind_address`: where this member's Gloo connections listen (reachable by the others).
  static Result<std::unique_ptr<ProcessGroup>> Join(const GroupMembership& membership, const std::string& fingerprint,
                                                    const std::string& bind_address, std::chrono::milliseconds timeout);
  ~ProcessGroup();

  // A value the leader makes once for the whole group (NCCL's unique id): the leader runs `make`
  // and publishes the result (or its error) under `key`; every member returns the same bytes, and
  // none (the leader included) before every member has them.
  Result<std::string> ShareFromLeader(const std::string& key, const std::function<Result<std::string>()>& make);
  // Every member offers `value` under `key`; every member gets the smallest, once all have it.
  Result<int> AgreeOnMinimum(const std::string& key, int value);

  // One communicator per rank of this member (global ranks first_rank ...), connected to every
  // other rank of the group: one Gloo communicator among the members, which this member's ranks
  // share through comm/hierarchical_communicator.h when there are several (their waits for each
  // other time out after `local_timeout`; 0: never).
  Result<std::vector<std::unique_ptr<Communicator>>> ConnectRanks(std::chrono::milliseconds local_timeout);

  // Every member has finished joining the collectives (ConnectRanks does it for the CPU backend;
  // the CUDA backend after NCCL's join): from now on the leader's shutdown reaches the followers.
  void MarkReady();

  // Leader: sends the plan to every follower. Follower: the next plan, or nullopt at shutdown.
  Status SendPlan(const StepPlan& plan);
  Result<std::optional<StepPlan>> ReceivePlan();
  void SendShutdown();  // leader, best effort
  // Leader, while idle: a message the followers skip; it fails when a follower has gone.
  Status SendHeartbeat();
  // Leader: members (itself included) whose rendezvous connection is still open; a member whose
  // process ended has closed it. Followers: -1 (they do not see the others).
  int ConnectedMembers() const;

  const GroupMembership& membership() const { return membership_; }

 private:
  struct Impl;
  explicit ProcessGroup(const GroupMembership& membership);
  // Waits (within the group timeout) until every member has read `key` from the leader's store.
  Status EveryMemberHasRead(const std::string& key);
  GroupMembership membership_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tpserve
