// Who this process is in a tensor-parallel group that spans processes or nodes: how many members,
// which one it is, where the rendezvous is, and which ranks it runs. Resolved from the command
// line (--nnodes, --node-rank, --rendezvous) or from the conventions users launch with —
// Kubernetes LeaderWorkerSet (one process per node) and torchrun (one process per rank) — with
// flags winning over the environment. Plain data and rules, tested without a network.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "common/status.h"

namespace tpserve {

inline constexpr int kDefaultRendezvousPort = 29500;  // torchrun's MASTER_PORT default
inline constexpr size_t kMinGroupSecretBytes = 16;

struct MembershipFlags {
  std::optional<int> nnodes;           // --nnodes
  std::optional<int> node_rank;        // --node-rank
  std::optional<std::string> rendezvous;  // --rendezvous HOST:PORT
  std::optional<int> tp;               // --tp (total TP degree)
  std::optional<std::string> group_secret_file;  // --group-secret-file (else TPSERVE_GROUP_SECRET)
};

struct GroupMembership {
  GroupMembership() = default;  // not an aggregate: GCC 12 misreads designated initializers around it
  int members = 1;        // "nodes": processes in the group (two may share a machine)
  int member = 0;         // this process's index; 0 is the leader
  std::string host;       // the leader's address
  int port = kDefaultRendezvousPort;
  int tp = 1;             // total TP degree
  int local_ranks = 1;    // ranks this process runs: tp / members
  int first_rank = 0;     // its first global rank: member * local_ranks
  int local_device = -1;  // torchrun: LOCAL_RANK, the GPU of this process's rank (-1: not given)
  std::string source;     // which convention set it, for the start-up log
  std::string secret;     // shared by the members, proves membership at the rendezvous ("": none)

  bool distributed() const { return members > 1; }
  bool leader() const { return member == 0; }
};

// `env`: the process environment (tests pass their own). Errors name the flag or variable.
Result<GroupMembership> ResolveMembership(const MembershipFlags& flags, const std::map<std::string, std::string>& env);

// The variables ResolveMembership reads, from the real environment.
std::map<std::string, std::string> MembershipEnvironment();

}  // namespace tpserve
