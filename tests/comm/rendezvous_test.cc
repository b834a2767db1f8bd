// The rendezvous port under hostile use (issue 27's findings, each a regression test): strangers
// and wrong secrets are refused at the handshake, a member writes only its own keys, keys, values
// and the store are bounded, connections are capped and their threads reaped, and once the group
// has formed nobody else can connect. The server runs in this process on loopback; the hostile
// clients are raw sockets.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>
#include <string>
#include <thread>

#include "comm/rendezvous_store.h"
#include "tests/server/raw_http.h"

namespace tpserve {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr char kRendezvousSecret[] = "rendezvous-test-secret-0123456789";

// Whether the server closes `fd` within `timeout` (reading and dropping what it sends first).
bool ClosedWithin(int fd, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buffer[256];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    if (poll(&p, 1, 20) != 1) continue;
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) return true;
  }
  return false;
}

std::unique_ptr<RendezvousServer> Server(int members, RendezvousLimits limits = {}) {
  auto server = RendezvousServer::Start("127.0.0.1", 0, members, kRendezvousSecret, limits);
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  return server.ok() ? std::move(server).value() : nullptr;
}

TEST(RendezvousKeys, TheLastPartNamesTheOwnerElseTheLeaderOwnsIt) {
  EXPECT_EQ(RendezvousKeyOwner("config/1", 2), 1);
  EXPECT_EQ(RendezvousKeyOwner("tp/0", 2), 0);
  EXPECT_EQ(RendezvousKeyOwner("control/3", 4), 3);
  EXPECT_EQ(RendezvousKeyOwner("min/kv_blocks/2", 3), 2);
  EXPECT_EQ(RendezvousKeyOwner("shared/nccl_unique_id", 4), 0);
  EXPECT_EQ(RendezvousKeyOwner("config/7", 2), 0);  // not a member: the leader's
  EXPECT_EQ(RendezvousKeyOwner("config/-1", 2), 0);
  EXPECT_EQ(RendezvousKeyOwner("config/99999999999999", 2), 0);
  EXPECT_EQ(RendezvousKeyOwner("1", 2), 1);
  EXPECT_EQ(RendezvousKeyOwner("tp/rank_1", 2), 1);  // Gloo's
  EXPECT_EQ(RendezvousKeyOwner("tp/rank_", 2), 0);
}

TEST(Rendezvous, AWrongSecretAStrangerIndexAndADuplicateMemberAreRefused) {
  auto server = Server(2);
  ASSERT_TRUE(server);
  auto wrong =
      RendezvousClient::Connect("127.0.0.1", server->port(), 1, "another-secret-0123456789", 2s);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kUnauthenticated);
  EXPECT_THAT(wrong.status().message(), HasSubstr("wrong group secret"));
  auto outside = RendezvousClient::Connect("127.0.0.1", server->port(), 2, kRendezvousSecret, 2s);
  ASSERT_FALSE(outside.ok());
  EXPECT_THAT(outside.status().message(), HasSubstr("outside the group of 2"));
  auto first = RendezvousClient::Connect("127.0.0.1", server->port(), 1, kRendezvousSecret, 2s);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto duplicate = RendezvousClient::Connect("127.0.0.1", server->port(), 1, kRendezvousSecret, 2s);
  ASSERT_FALSE(duplicate.ok());
  EXPECT_THAT(duplicate.status().message(), HasSubstr("member 1 is already connected"));
  // Once the first goes, the member may connect again (a restarted follower).
  first->reset();
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  Result<std::unique_ptr<RendezvousClient>> again = Status(StatusCode::kUnavailable, "not tried");
  while (!again.ok() && std::chrono::steady_clock::now() < deadline) {
    again = RendezvousClient::Connect("127.0.0.1", server->port(), 1, kRendezvousSecret, 2s);
    if (!again.ok()) std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(again.ok()) << again.status().ToString();
}

TEST(Rendezvous, AMemberWritesOnlyItsOwnKeysAndReadsAll) {
  auto server = Server(2);
  ASSERT_TRUE(server);
  auto leader = RendezvousClient::Connect("127.0.0.1", server->port(), 0, kRendezvousSecret, 2s);
  auto follower = RendezvousClient::Connect("127.0.0.1", server->port(), 1, kRendezvousSecret, 2s);
  ASSERT_TRUE(leader.ok() && follower.ok());
  EXPECT_TRUE((*follower)->Set("config/1", "mine").ok());
  const Status forged = (*follower)->Set("config/0", "the leader's");
  EXPECT_EQ(forged.code(), StatusCode::kUnauthenticated);
  EXPECT_THAT(forged.message(), HasSubstr("member 1 may not write 'config/0'"));
  EXPECT_FALSE((*follower)->Set("shared/nccl_unique_id", "forged").ok());
  EXPECT_FALSE((*leader)->Set("config/1", "overwritten").ok());
  EXPECT_TRUE((*leader)->Set("shared/nccl_unique_id", "id").ok());
  auto read = (*leader)->Get("config/1", 1s);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(*read, "mine");  // the refused writes changed nothing
  auto shared = (*follower)->Get("shared/nccl_unique_id", 1s);
  ASSERT_TRUE(shared.ok());
  EXPECT_EQ(*shared, "id");
}

TEST(Rendezvous, KeysValuesAndTheStoreAreBounded) {
  auto server = Server(1, {.max_key_bytes = 32, .max_value_bytes = 1000, .max_store_bytes = 1500});
  ASSERT_TRUE(server);
  auto member = RendezvousClient::Connect("127.0.0.1", server->port(), 0, kRendezvousSecret, 2s);
  ASSERT_TRUE(member.ok());
  EXPECT_TRUE((*member)->Set("a/0", std::string(900, 'x')).ok());
  EXPECT_TRUE(
      (*member)->Set("a/0", std::string(950, 'y')).ok());  // a replaced value is not counted twice
  const Status full = (*member)->Set("b/0", std::string(900, 'x'));
  EXPECT_THAT(full.message(), HasSubstr("the store is full"));
  // Past the value limit the connection is dropped: nothing of it is kept.
  EXPECT_FALSE((*member)->Set("c/0", std::string(2000, 'x')).ok());
  auto again = RendezvousClient::Connect("127.0.0.1", server->port(), 0, kRendezvousSecret, 2s);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE((*again)->Set(std::string(100, 'k'), "v").ok());  // a key past its limit
}

TEST(Rendezvous, StrangersAreCutOffCappedAndTheirThreadsReaped) {
  auto server = Server(2, {.handshake_timeout = 300ms});
  ASSERT_TRUE(server);
  const int threads_before = testing::Threads(getpid());
  // Connect and close, many times: each connection's thread ends and is joined. (Paced so that the
  // listen backlog does not fill: a full backlog makes connect wait for SYN retries, not the
  // server.)
  for (int i = 0; i < 2000; ++i) {
    const int fd = testing::Connect(server->port());
    ASSERT_GE(fd, 0) << "connection " << i;
    close(fd);
    std::this_thread::sleep_for(500us);
  }
  // Garbage instead of the handshake answer, and silence: both closed.
  const int garbage = testing::Connect(server->port());
  std::mt19937 rng(7);
  std::string noise(4096, '\0');
  for (char& c : noise) c = static_cast<char>(rng());
  send(garbage, noise.data(), noise.size(), MSG_NOSIGNAL);
  EXPECT_TRUE(ClosedWithin(garbage, 2s));
  close(garbage);
  std::vector<int> silent;
  for (int i = 0; i < 20; ++i) silent.push_back(testing::Connect(server->port()));
  int closed_at_once = 0;
  for (int fd : silent) closed_at_once += ClosedWithin(fd, 50ms) ? 1 : 0;
  EXPECT_GE(closed_at_once, 20 - 6) << "more connections than members + 4 were held";
  for (int fd : silent)
    EXPECT_TRUE(ClosedWithin(fd, 2s)) << "a silent connection outlived the handshake timeout";
  for (int fd : silent) close(fd);
  const auto deadline = std::chrono::steady_clock::now() + 3s;
  while (server->connections() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  EXPECT_EQ(server->connections(), 0);
  std::this_thread::sleep_for(300ms);  // the acceptor reaps on its next turn
  EXPECT_LE(testing::Threads(getpid()), threads_before + 6);
  // Members still get in.
  auto member = RendezvousClient::Connect("127.0.0.1", server->port(), 0, kRendezvousSecret, 2s);
  EXPECT_TRUE(member.ok()) << member.status().ToString();
}

TEST(Rendezvous, OnceTheGroupHasFormedNobodyElseConnects) {
  auto server = Server(2);
  ASSERT_TRUE(server);
  auto member = RendezvousClient::Connect("127.0.0.1", server->port(), 0, kRendezvousSecret, 2s);
  ASSERT_TRUE(member.ok());
  server->StopAccepting();
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  int fd = 0;
  while ((fd = testing::Connect(server->port())) >= 0 &&
         std::chrono::steady_clock::now() < deadline) {
    close(fd);
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_LT(fd, 0) << "the port still accepts connections";
  // The member's connection still works.
  EXPECT_TRUE((*member)->Set("config/0", "x").ok());
}

}  // namespace
}  // namespace tpserve
