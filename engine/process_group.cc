#include "engine/process_group.h"

#if defined(TPSERVE_HAVE_GLOO)
#include <algorithm>

#include "comm/gloo_communicator.h"
#include "comm/hierarchical_communicator.h"
#include "comm/rendezvous_store.h"
#include "engine/step/step_plan_wire.h"
#endif

namespace tpserve {

#if defined(TPSERVE_HAVE_GLOO)

struct ProcessGroup::Impl {
  std::unique_ptr<RendezvousServer> server;  // the leader's
  std::unique_ptr<RendezvousClient> store;
  std::unique_ptr<GlooCommunicator> control;  // members as ranks: plans, shutdown
  std::string bind_address;
  std::chrono::milliseconds timeout{30000};
  std::vector<uint8_t> wire;  // the encoded plan, reused
  bool ready = false;         // every rank connected: the followers are in their plan loop
};

ProcessGroup::ProcessGroup(const GroupMembership& membership)
    : membership_(membership), impl_(std::make_unique<Impl>()) {}

namespace {

// The control channel's messages: an encoded plan (step_plan_wire: longer than one byte), this one
// byte (a heartbeat), or nothing (shutdown).
constexpr uint8_t kHeartbeatByte = 0xA5;

Status Mismatch(int member, const std::string& leader, const std::string& theirs) {
  return FailedPrecondition("member " + std::to_string(member) + " loaded a different model or flags than the leader:\n  leader: " +
                            leader + "\n  member " + std::to_string(member) + ": " + theirs);
}

}  // namespace

ProcessGroup::~ProcessGroup() = default;

Result<std::unique_ptr<ProcessGroup>> ProcessGroup::Join(const GroupMembership& m, const std::string& fingerprint,
                                                         const std::string& bind_address,
                                                         std::chrono::milliseconds timeout) {
  std::unique_ptr<ProcessGroup> group(new ProcessGroup(m));
  Impl& g = *group->impl_;
  g.bind_address = bind_address;
  g.timeout = timeout;
  if (m.leader()) {
    ASSIGN_OR_RETURN(g.server, RendezvousServer::Start(m.host, m.port, m.members, m.secret));
  }
  ASSIGN_OR_RETURN(g.store, RendezvousClient::Connect(m.host, m.port, m.member, m.secret, timeout));
  // Every member publishes what it loaded; the leader checks everyone, everyone checks the leader.
  const std::string me = "config/" + std::to_string(m.member);
  RETURN_IF_ERROR(g.store->Set(me, fingerprint));
  ASSIGN_OR_RETURN(std::string leader, g.store->Get("config/0", timeout));
  // Tell the leader it may go (its server must outlive this member's read of config/0).
  RETURN_IF_ERROR(g.store->Set("seen/" + std::to_string(m.member), "1"));
  if (leader != fingerprint) return Mismatch(m.member, leader, fingerprint);
  if (m.leader()) {
    for (int member = 1; member < m.members; ++member) {
      ASSIGN_OR_RETURN(std::string theirs, g.store->Get("config/" + std::to_string(member), timeout));
      if (theirs != fingerprint) {
        (void)g.store->Get("seen/" + std::to_string(member), timeout);  // so that it can say why too
        return Mismatch(member, fingerprint, theirs);
      }
    }
    // Every member is connected (it wrote its config): nobody else needs the port.
    g.server->StopAccepting();
  }
  // The control channel waits for the leader's next step however long the server is idle; a dead
  // leader still shows at once (its connections close). Meeting the peers takes the group timeout:
  // a member whose peer never connects (a duplicate --node-rank, say) fails instead of waiting.
  GlooOptions control{.bind_address = bind_address,
                      .prefix = "control",
                      .timeout = std::chrono::hours(24 * 365),
                      .connect_timeout = timeout};
  ASSIGN_OR_RETURN(g.control, GlooCommunicator::Connect(*g.store, m.member, m.members, control));
  return group;
}

Result<std::string> ProcessGroup::ShareFromLeader(const std::string& key,
                                                  const std::function<Result<std::string>()>& make) {
  // The stored value is tagged: 'V' and the bytes, or 'E' and the leader's error, so that a failure
  // on the leader is an error on every member at once rather than a wait for the timeout.
  const std::string stored_key = "shared/" + key;
  if (membership_.leader()) {
    Result<std::string> made = make();
    RETURN_IF_ERROR(impl_->store->Set(stored_key, made.ok() ? "V" + *made : "E" + made.status().message()));
    const Status read = EveryMemberHasRead(stored_key);
    if (!made.ok()) return made.status();  // the leader's own error first
    RETURN_IF_ERROR(read);
    return made;
  }
  Result<std::string> stored = impl_->store->Get(stored_key, impl_->timeout);
  if (!stored.ok()) return stored.status();
  RETURN_IF_ERROR(EveryMemberHasRead(stored_key));
  const std::string_view value = *stored;
  const char tag = value.empty() ? '\0' : value.front();
  if (tag == 'E') return FailedPrecondition("the leader could not make " + key + ": " + std::string(value.substr(1)));
  if (tag != 'V') return DataLoss("rendezvous key " + stored_key + " is malformed");
  return std::string(value.substr(1));
}

Result<int> ProcessGroup::AgreeOnMinimum(const std::string& key, int value) {
  const std::string prefix = "min/" + key + "/";
  RETURN_IF_ERROR(impl_->store->Set(prefix + std::to_string(membership_.member), std::to_string(value)));
  int minimum = value;
  for (int member = 0; member < membership_.members; ++member) {
    ASSIGN_OR_RETURN(std::string theirs, impl_->store->Get(prefix + std::to_string(member), impl_->timeout));
    try {
      minimum = std::min(minimum, std::stoi(theirs));
    } catch (const std::exception&) {
      return DataLoss("rendezvous key " + prefix + std::to_string(member) + " holds '" + theirs + "', not a number");
    }
  }
  RETURN_IF_ERROR(EveryMemberHasRead(prefix + "*"));
  return minimum;
}

Status ProcessGroup::EveryMemberHasRead(const std::string& key) {
  // The store lives in the leader's ProcessGroup: a leader that returned as soon as it had written
  // (or read) would be free to leave, closing the store under a member still reading.
  Status met = impl_->control->Barrier(impl_->timeout);
  if (!met.ok()) return Status(met.code(), "waiting for every member to read rendezvous key " + key + ": " + met.message());
  return met;
}

Result<std::vector<std::unique_ptr<Communicator>>> ProcessGroup::ConnectRanks(std::chrono::milliseconds local_timeout) {
  const GroupMembership& m = membership_;
  // One Gloo communicator among the members; this member's ranks meet in memory and share it.
  ASSIGN_OR_RETURN(std::unique_ptr<GlooCommunicator> across,
                   GlooCommunicator::Connect(*impl_->store, m.member, m.members,
                                             {.bind_address = impl_->bind_address, .prefix = "tp", .timeout = impl_->timeout}));
  std::vector<std::unique_ptr<Communicator>> comms;
  if (m.local_ranks == 1) {
    comms.push_back(std::move(across));
  } else {
    comms = HierarchicalCommunicator::CreateGroup(std::move(across), m.local_ranks, local_timeout);
  }
  MarkReady();
  return comms;
}

void ProcessGroup::MarkReady() { impl_->ready = true; }

Status ProcessGroup::SendPlan(const StepPlan& plan) {
  EncodeStepPlan(plan, &impl_->wire);
  // Within the group timeout: Gloo's send waits for the follower to be ready to receive, so a
  // stalled (SIGSTOPped) follower would otherwise hold the leader here forever.
  return impl_->control->BroadcastBytes(&impl_->wire, 0, impl_->timeout);
}

Status ProcessGroup::SendHeartbeat() {
  impl_->wire.assign(1, kHeartbeatByte);
  return impl_->control->BroadcastBytes(&impl_->wire, 0, impl_->timeout);
}

int ProcessGroup::ConnectedMembers() const {
  return impl_->server ? impl_->server->connected_members() : -1;
}

Result<std::optional<StepPlan>> ProcessGroup::ReceivePlan() {
  do {
    RETURN_IF_ERROR(impl_->control->BroadcastBytes(&impl_->wire, 0));
  } while (impl_->wire.size() == 1 && impl_->wire[0] == kHeartbeatByte);
  if (impl_->wire.empty()) return std::optional<StepPlan>();  // shutdown
  ASSIGN_OR_RETURN(StepPlan plan, DecodeStepPlan(impl_->wire));
  return std::optional<StepPlan>(std::move(plan));
}

void ProcessGroup::SendShutdown() {
  // Only to followers that reached their plan loop, and never waiting longer than a collective may.
  if (!impl_->ready || impl_->control == nullptr) return;
  impl_->wire.clear();
  (void)impl_->control->BroadcastBytes(&impl_->wire, 0, impl_->timeout);
}

#else  // no Gloo in this build

struct ProcessGroup::Impl {};
ProcessGroup::ProcessGroup(const GroupMembership& membership) : membership_(membership) {}
ProcessGroup::~ProcessGroup() = default;
Result<std::unique_ptr<ProcessGroup>> ProcessGroup::Join(const GroupMembership&, const std::string&,
                                                         const std::string&, std::chrono::milliseconds) {
  return Unimplemented("this build has no Gloo (apt-get install libgloo-dev): one process only");
}
Result<std::vector<std::unique_ptr<Communicator>>> ProcessGroup::ConnectRanks(std::chrono::milliseconds) {
  return Unimplemented("no Gloo");
}
Status ProcessGroup::SendPlan(const StepPlan&) { return Unimplemented("no Gloo"); }
Result<std::optional<StepPlan>> ProcessGroup::ReceivePlan() { return Unimplemented("no Gloo"); }
void ProcessGroup::SendShutdown() {}
void ProcessGroup::MarkReady() {}
Status ProcessGroup::SendHeartbeat() { return Unimplemented("no Gloo"); }
int ProcessGroup::ConnectedMembers() const { return -1; }
Result<std::string> ProcessGroup::ShareFromLeader(const std::string&, const std::function<Result<std::string>()>&) {
  return Unimplemented("no Gloo");
}
Result<int> ProcessGroup::AgreeOnMinimum(const std::string&, int) { return Unimplemented("no Gloo"); }

#endif

}  // namespace tpserve
