// Who a process is in a multi-process group: flags, LeaderWorkerSet and torchrun variables, the
// precedence between them, and errors that name the flag or variable.
#include "comm/group_membership.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace tpserve {
namespace {

using ::testing::HasSubstr;
using Env = std::map<std::string, std::string>;

TEST(GroupMembership, NothingGivenIsOneProcess) {
  auto m = ResolveMembership({.tp = 4}, {});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_FALSE(m->distributed());
  EXPECT_EQ(m->local_ranks, 4);
  EXPECT_EQ(m->source, "single process");
}

TEST(GroupMembership, FlagsSplitTheTpDegreeAmongMembers) {
  auto m = ResolveMembership({.nnodes = 2, .node_rank = 1, .rendezvous = "10.0.0.5:7000", .tp = 8}, {});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->members, 2);
  EXPECT_EQ(m->member, 1);
  EXPECT_FALSE(m->leader());
  EXPECT_EQ(m->host, "10.0.0.5");
  EXPECT_EQ(m->port, 7000);
  EXPECT_EQ(m->local_ranks, 4);
  EXPECT_EQ(m->first_rank, 4);
  EXPECT_THAT(m->source, HasSubstr("flags"));
  // --tp defaults to the number of members; IPv6 in brackets; no port: torchrun's default.
  auto v6 = ResolveMembership({.nnodes = 4, .node_rank = 0, .rendezvous = "[::1]"}, {});
  ASSERT_TRUE(v6.ok()) << v6.status().ToString();
  EXPECT_EQ(v6->tp, 4);
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, kDefaultRendezvousPort);
}

TEST(GroupMembership, LeaderWorkerSetAndTorchrunVariables) {
  const Env lws = {{"LWS_LEADER_ADDRESS", "tpserve-0.tpserve"}, {"LWS_GROUP_SIZE", "2"}, {"LWS_WORKER_INDEX", "1"}};
  auto m = ResolveMembership({.tp = 16}, lws);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->host, "tpserve-0.tpserve");
  EXPECT_EQ(m->members, 2);
  EXPECT_EQ(m->first_rank, 8);
  EXPECT_THAT(m->source, HasSubstr("LeaderWorkerSet"));

  const Env torchrun = {{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29501"}, {"WORLD_SIZE", "4"},
                        {"RANK", "3"}, {"LOCAL_RANK", "3"}};
  auto t = ResolveMembership({}, torchrun);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->members, 4);
  EXPECT_EQ(t->member, 3);
  EXPECT_EQ(t->port, 29501);
  EXPECT_EQ(t->tp, 4);
  EXPECT_EQ(t->local_ranks, 1);
  EXPECT_EQ(t->local_device, 3);
  EXPECT_THAT(ResolveMembership({.tp = 8}, torchrun).status().message(), HasSubstr("must equal WORLD_SIZE 4"));
  // Flags win over the environment.
  auto flags = ResolveMembership({.nnodes = 2, .node_rank = 0, .rendezvous = "127.0.0.1:9000"}, torchrun);
  ASSERT_TRUE(flags.ok());
  EXPECT_EQ(flags->members, 2);
  EXPECT_THAT(flags->source, HasSubstr("flags"));
}

TEST(GroupMembership, ErrorsNameTheFlagOrVariable) {
  EXPECT_THAT(ResolveMembership({.nnodes = 2}, {}).status().message(), HasSubstr("go together"));
  EXPECT_THAT(ResolveMembership({.nnodes = 2, .node_rank = 2, .rendezvous = "h:1"}, {}).status().message(),
              HasSubstr("member 2 is outside 0..1"));
  EXPECT_THAT(ResolveMembership({.nnodes = 3, .node_rank = 0, .rendezvous = "h:1", .tp = 4}, {}).status().message(),
              HasSubstr("--tp 4 must divide among 3 members"));
  EXPECT_THAT(ResolveMembership({.nnodes = 2, .node_rank = 0, .rendezvous = "h:99999"}, {}).status().message(),
              HasSubstr("port 99999"));
  EXPECT_THAT(ResolveMembership({.nnodes = 2, .node_rank = 0, .rendezvous = ":80"}, {}).status().message(),
              HasSubstr("no host"));
  EXPECT_THAT(ResolveMembership({}, {{"LWS_LEADER_ADDRESS", "x"}}).status().message(), HasSubstr("LWS_GROUP_SIZE"));
  EXPECT_THAT(ResolveMembership({}, {{"MASTER_ADDR", "x"}, {"WORLD_SIZE", "two"}, {"RANK", "0"}}).status().message(),
              HasSubstr("WORLD_SIZE: 'two' is not a whole number"));
}

TEST(GroupMembership, TheGroupSecretComesFromItsFileElseTheEnvironmentAndMustBeLongEnough) {
  const MembershipFlags flags{.nnodes = 2, .node_rank = 1, .rendezvous = "10.0.0.5:7000"};
  auto none = ResolveMembership(flags, {});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->secret, "");
  auto from_env = ResolveMembership(flags, {{"TPSERVE_GROUP_SECRET", "env-secret-0123456789\n"}});
  ASSERT_TRUE(from_env.ok()) << from_env.status().ToString();
  EXPECT_EQ(from_env->secret, "env-secret-0123456789");  // trailing white space dropped
  const std::string path = ::testing::TempDir() + "/group_secret_test";
  std::ofstream(path) << "file-secret-0123456789\nsecond line ignored\n";
  MembershipFlags with_file = flags;
  with_file.group_secret_file = path;
  auto from_file = ResolveMembership(with_file, {{"TPSERVE_GROUP_SECRET", "env-secret-0123456789"}});
  ASSERT_TRUE(from_file.ok()) << from_file.status().ToString();
  EXPECT_EQ(from_file->secret, "file-secret-0123456789");  // the flag wins
  std::ofstream(path) << "short\n";
  auto short_secret = ResolveMembership(with_file, {});
  ASSERT_FALSE(short_secret.ok());
  EXPECT_THAT(short_secret.status().message(), HasSubstr("--group-secret-file " + path + ": a secret of 5 bytes"));
  std::remove(path.c_str());
  auto missing = ResolveMembership(with_file, {});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("cannot open"));
}

}  // namespace
}  // namespace tpserve
