#include "model/process_group.h"

#if defined(TPSERVE_HAVE_GLOO)
#include <thread>

#include "comm/gloo_communicator.h"
#include "comm/rendezvous_store.h"
#include "model/step_plan_wire.h"
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
    ASSIGN_OR_RETURN(g.server, RendezvousServer::Start(m.host, m.port));
  }
  ASSIGN_OR_RETURN(g.store, RendezvousClient::Connect(m.host, m.port, timeout));
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
  }
  // The control channel waits for the leader's next step however long the server is idle; a dead
  // leader still shows at once (its connections close).
  GlooOptions control{.bind_address = bind_address, .prefix = "control", .timeout = std::chrono::hours(24 * 365)};
  ASSIGN_OR_RETURN(g.control, GlooCommunicator::Connect(*g.store, m.member, m.members, control));
  return group;
}

Result<std::vector<std::unique_ptr<Communicator>>> ProcessGroup::ConnectRanks() {
  const GroupMembership& m = membership_;
  std::vector<Result<std::unique_ptr<GlooCommunicator>>> connected;
  for (int i = 0; i < m.local_ranks; ++i) connected.emplace_back(Internal("not connected"));
  std::vector<std::thread> threads;  // the ranks of one member connect together, not one by one
  for (int i = 0; i < m.local_ranks; ++i) {
    threads.emplace_back([&, i] {
      connected[i] = GlooCommunicator::Connect(*impl_->store, m.first_rank + i, m.tp,
                                               {.bind_address = impl_->bind_address, .prefix = "tp",
                                                .timeout = impl_->timeout});
    });
  }
  for (auto& thread : threads) thread.join();
  std::vector<std::unique_ptr<Communicator>> comms;
  for (auto& result : connected) {
    RETURN_IF_ERROR(result.status());
    comms.push_back(std::move(result).value());
  }
  impl_->ready = true;
  return comms;
}

Status ProcessGroup::SendPlan(const StepPlan& plan) {
  EncodeStepPlan(plan, &impl_->wire);
  return impl_->control->BroadcastBytes(&impl_->wire, 0);
}

Result<std::optional<StepPlan>> ProcessGroup::ReceivePlan() {
  RETURN_IF_ERROR(impl_->control->BroadcastBytes(&impl_->wire, 0));
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
Result<std::vector<std::unique_ptr<Communicator>>> ProcessGroup::ConnectRanks() { return Unimplemented("no Gloo"); }
Status ProcessGroup::SendPlan(const StepPlan&) { return Unimplemented("no Gloo"); }
Result<std::optional<StepPlan>> ProcessGroup::ReceivePlan() { return Unimplemented("no Gloo"); }
void ProcessGroup::SendShutdown() {}

#endif

}  // namespace tpserve
