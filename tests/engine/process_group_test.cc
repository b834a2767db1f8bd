// The rendezvous steps of a multi-process group, with members as threads on loopback: the
// fingerprint check, the leader's value shared with every member (NCCL's unique id for the CUDA
// backend: exact bytes, zeros included, or the leader's error on every member), and the agreed
// minimum (KV blocks). Where the CUDA module is built, the real ncclGetUniqueId goes through it.
#include "engine/process_group.h"

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <thread>

#include "engine/cuda_backend.h"

namespace tpserve {
namespace {

// A port the OS has just handed out on loopback (free unless something takes it in between).
int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    close(fd);
    return 0;
  }
  close(fd);
  return ntohs(address.sin_port);
}

// Runs fn(member, group) for `members` members that join one group; each returns its result.
void OnMembers(int members, const std::function<std::string(int)>& fingerprint,
               const std::function<void(int, Result<std::unique_ptr<ProcessGroup>>&)>& fn) {
  const int port = FreeLoopbackPort();
  std::vector<std::thread> threads;
  for (int m = 0; m < members; ++m) {
    threads.emplace_back([&, m] {
      GroupMembership membership;
      membership.members = members;
      membership.member = m;
      membership.host = "127.0.0.1";
      membership.port = port;
      membership.tp = members;
      membership.first_rank = m;
      auto group = ProcessGroup::Join(membership, fingerprint(m), "127.0.0.1", std::chrono::seconds(20));
      fn(m, group);
    });
  }
  for (auto& t : threads) t.join();
}

std::string SameEverywhere(int) { return "model tiny; tp 3"; }

TEST(ProcessGroup, TheLeadersBytesReachEveryMemberExactly) {
  std::string id(kNcclUniqueIdBytes, '\0');
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<char>((i * 37) % 256);  // zeros and high bytes
  std::vector<std::string> got(3);
  OnMembers(3, SameEverywhere, [&](int m, Result<std::unique_ptr<ProcessGroup>>& group) {
    ASSERT_TRUE(group.ok()) << group.status().ToString();
    int made = 0;
    auto shared = (*group)->ShareFromLeader("nccl_unique_id", [&]() -> Result<std::string> {
      ++made;
      return id;
    });
    ASSERT_TRUE(shared.ok()) << shared.status().ToString();
    got[m] = *shared;
    EXPECT_EQ(made, m == 0 ? 1 : 0) << "only the leader makes it";
  });
  for (const std::string& bytes : got) EXPECT_EQ(bytes, id);
}

TEST(ProcessGroup, TheLeadersFailureIsAnErrorOnEveryMemberAtOnce) {
  OnMembers(2, SameEverywhere, [&](int m, Result<std::unique_ptr<ProcessGroup>>& group) {
    ASSERT_TRUE(group.ok()) << group.status().ToString();
    const auto start = std::chrono::steady_clock::now();
    auto shared = (*group)->ShareFromLeader("nccl_unique_id", []() -> Result<std::string> {
      return Status(StatusCode::kUnavailable, "ncclGetUniqueId: no network interface");
    });
    ASSERT_FALSE(shared.ok());
    EXPECT_NE(shared.status().message().find("no network interface"), std::string::npos) << shared.status().message();
    if (m > 0) {
      EXPECT_NE(shared.status().message().find("the leader could not make nccl_unique_id"), std::string::npos);
      EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << "not the timeout";
    }
  });
}

// The store lives in the leader's ProcessGroup: a leader that shares its value and leaves at once
// must not close it under a member that asks later (the leader waits until every member has it).
TEST(ProcessGroup, AMemberThatAsksLateStillGetsTheLeadersValue) {
  std::vector<std::string> got(2);
  OnMembers(2, SameEverywhere, [&](int m, Result<std::unique_ptr<ProcessGroup>>& group) {
    ASSERT_TRUE(group.ok()) << group.status().ToString();
    if (m == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    auto shared = (*group)->ShareFromLeader("nccl_unique_id", []() -> Result<std::string> { return std::string("id"); });
    ASSERT_TRUE(shared.ok()) << "member " << m << ": " << shared.status().ToString();
    got[m] = *shared;
  });  // each member's group (the leader's store with it) goes as soon as its call returns
  EXPECT_EQ(got, (std::vector<std::string>{"id", "id"}));
}

TEST(ProcessGroup, MembersAgreeOnTheSmallestValue) {
  std::vector<int> agreed(3, -1);
  OnMembers(3, SameEverywhere, [&](int m, Result<std::unique_ptr<ProcessGroup>>& group) {
    ASSERT_TRUE(group.ok()) << group.status().ToString();
    auto minimum = (*group)->AgreeOnMinimum("kv_blocks", std::vector<int>{5000, 4096, 4500}[m]);
    ASSERT_TRUE(minimum.ok()) << minimum.status().ToString();
    agreed[m] = *minimum;
  });
  EXPECT_EQ(agreed, (std::vector<int>{4096, 4096, 4096}));
}

TEST(ProcessGroup, AMismatchIsRefusedOnBothSides) {
  OnMembers(2, [](int m) { return m == 0 ? std::string("tp 2; block_size 16") : std::string("tp 2; block_size 8"); },
            [&](int, Result<std::unique_ptr<ProcessGroup>>& group) {
              ASSERT_FALSE(group.ok());
              EXPECT_NE(group.status().message().find("different model or flags"), std::string::npos)
                  << group.status().message();
            });
}

#if defined(TPSERVE_TEST_CUDA_MODULE)
// The real id from NCCL (no GPU needed), through the module, shared by the rendezvous.
TEST(ProcessGroup, NcclsUniqueIdFromTheModuleIsShared) {
  auto id = MakeNcclUniqueId(TPSERVE_TEST_CUDA_MODULE);
  if (!id.ok()) GTEST_SKIP() << "NCCL cannot make an id here: " << id.status().ToString();
  EXPECT_EQ(id->size(), kNcclUniqueIdBytes);
  std::vector<std::string> got(2);
  OnMembers(2, SameEverywhere, [&](int m, Result<std::unique_ptr<ProcessGroup>>& group) {
    ASSERT_TRUE(group.ok()) << group.status().ToString();
    auto shared = (*group)->ShareFromLeader("nccl_unique_id", [&] { return MakeNcclUniqueId(TPSERVE_TEST_CUDA_MODULE); });
    ASSERT_TRUE(shared.ok()) << shared.status().ToString();
    got[m] = *shared;
  });
  EXPECT_EQ(got[0].size(), kNcclUniqueIdBytes);
  EXPECT_EQ(got[0], got[1]);
  EXPECT_NE(got[0], *id) << "every call makes a new id";
}
#endif

}  // namespace
}  // namespace tpserve
