// Ranks in different "processes" (threads with their own Gloo contexts, meeting through the real
// TCP rendezvous on loopback): every collective gives bitwise what the in-process communicator
// gives on the same inputs, and a rank that never comes is a timely error, not a hang.
#include "comm/gloo_communicator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>
#include <utility>

#include "comm/in_process_communicator.h"

namespace tpserve {
namespace {

using ::testing::HasSubstr;

constexpr char kGlooSecret[] = "gloo-test-secret-0123456789";

std::vector<float> Inputs(int rank, size_t count) {
  std::mt19937 rng(100 + rank);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> v(count);
  for (float& x : v) x = normal(rng);
  return v;
}

// Runs fn(rank, comm) on `world` threads, each with its own Gloo communicator.
template <typename Fn>
void OnGlooRanks(int world, const std::string& prefix, Fn&& fn) {
  auto server = RendezvousServer::Start("127.0.0.1", 0, world, kGlooSecret);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto store = RendezvousClient::Connect("127.0.0.1", (*server)->port(), r, kGlooSecret, std::chrono::seconds(20));
      ASSERT_TRUE(store.ok()) << store.status().ToString();
      auto comm = GlooCommunicator::Connect(**store, r, world, {.prefix = prefix});
      ASSERT_TRUE(comm.ok()) << comm.status().ToString();
      fn(r, **comm);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(GlooCommunicator, EveryCollectiveEqualsTheInProcessOneBitwise) {
  for (int world : {2, 4}) {
    const size_t count = 1000 + world;  // not a multiple of anything
    // The reference: the same inputs through the in-process communicator.
    std::vector<std::vector<float>> want(world);
    {
      auto group = InProcessCommunicator::CreateGroup(world);
      std::vector<std::thread> threads;
      for (int r = 0; r < world; ++r) {
        threads.emplace_back([&, r] {
          want[r] = Inputs(r, count);
          ASSERT_TRUE(group[r]->AllReduceSum(want[r].data(), count).ok());
        });
      }
      for (auto& t : threads) t.join();
    }
    OnGlooRanks(world, "w" + std::to_string(world), [&](int r, GlooCommunicator& comm) {
      std::vector<float> data = Inputs(r, count);
      ASSERT_TRUE(comm.AllReduceSum(data.data(), count).ok());
      EXPECT_EQ(data, want[r]) << "AllReduce, rank " << r << " of " << world;

      const std::vector<float> mine = Inputs(r, count);
      std::vector<float> gathered(count * world);
      ASSERT_TRUE(comm.AllGather(mine.data(), gathered.data(), count).ok());
      for (int q = 0; q < world; ++q) {
        EXPECT_TRUE(std::equal(gathered.begin() + q * count, gathered.begin() + (q + 1) * count, Inputs(q, count).begin()))
            << "AllGather chunk " << q;
      }
      // ReduceScatter: chunk r of the rank-ordered sum of every rank's [world * count] input.
      std::vector<float> input(count * world), chunk(count);
      for (size_t i = 0; i < input.size(); ++i) input[i] = static_cast<float>((r + 1) * (i % 13)) * 0.25f;
      ASSERT_TRUE(comm.ReduceScatterSum(input.data(), chunk.data(), count).ok());
      for (size_t i = 0; i < count; ++i) {
        float sum = 0;
        for (int q = 0; q < world; ++q) sum += static_cast<float>((q + 1) * ((r * count + i) % 13)) * 0.25f;
        ASSERT_EQ(chunk[i], sum) << "ReduceScatter element " << i;
      }
      std::vector<float> broadcast = r == 1 ? Inputs(7, 33) : std::vector<float>(33, 0.0f);
      ASSERT_TRUE(comm.Broadcast(broadcast.data(), 33, 1).ok());
      EXPECT_EQ(broadcast, Inputs(7, 33));
      std::vector<uint8_t> bytes = r == 0 ? std::vector<uint8_t>{1, 2, 3, 250} : std::vector<uint8_t>{};
      ASSERT_TRUE(comm.BroadcastBytes(&bytes, 0).ok());
      EXPECT_EQ(bytes, (std::vector<uint8_t>{1, 2, 3, 250}));
      // Sizes around the 4 KiB frame (one message) and beyond it (a second one, then a grown
      // frame), back to the empty shutdown message: every rank gets exactly the root's bytes.
      for (size_t size : {0ul, 4087ul, 4088ul, 4089ul, 100000ul, 5000ul, 200000ul, 0ul, 17ul}) {
        std::vector<uint8_t> payload(size);
        for (size_t i = 0; i < size; ++i) payload[i] = static_cast<uint8_t>((i * 31 + size) & 0xff);
        std::vector<uint8_t> got = r == 0 ? payload : std::vector<uint8_t>(3, 9);
        ASSERT_TRUE(comm.BroadcastBytes(&got, 0).ok());
        ASSERT_EQ(got, payload) << "size " << size;
      }
      EXPECT_TRUE(comm.Barrier().ok());
    });
  }
}

TEST(GlooCommunicator, AMemberThatNeverComesIsATimelyError) {
  auto server = RendezvousServer::Start("127.0.0.1", 0, 2, kGlooSecret);
  ASSERT_TRUE(server.ok());
  auto store = RendezvousClient::Connect("127.0.0.1", (*server)->port(), 0, kGlooSecret, std::chrono::milliseconds(800));
  ASSERT_TRUE(store.ok());
  const auto start = std::chrono::steady_clock::now();
  auto comm = GlooCommunicator::Connect(**store, 0, 2, {.prefix = "lonely", .timeout = std::chrono::milliseconds(800)});
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), StatusCode::kUnavailable);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

// A store that holds back one rank's read of another rank's Gloo address (a slow member).
class SlowToReadStore : public gloo::rendezvous::Store {
 public:
  SlowToReadStore(gloo::rendezvous::Store& inner, std::string slow_key, std::chrono::milliseconds delay)
      : inner_(inner), slow_key_(std::move(slow_key)), delay_(delay) {}
  std::atomic<bool> read{false};  // the slow key has been read

  void set(const std::string& key, const std::vector<char>& data) override { inner_.set(key, data); }
  std::vector<char> get(const std::string& key) override {
    if (key == slow_key_) std::this_thread::sleep_for(delay_);
    auto value = inner_.get(key);
    if (key == slow_key_) read = true;
    return value;
  }
  void wait(const std::vector<std::string>& keys) override { inner_.wait(keys); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    inner_.wait(keys, timeout);
  }

 private:
  gloo::rendezvous::Store& inner_;
  std::string slow_key_;
  std::chrono::milliseconds delay_;
};

// Gloo's connectFullMesh returns on the connecting side of a pair once the kernel has completed
// the TCP handshake into the peer's listen backlog, before the peer has even read this rank's
// address. A rank that connected and left at once (a short-lived group, a member failing just
// after) closed the pair under a peer still connecting: "Connection closed by peer". Connect must
// return on no rank until every rank is connected. Which side of a pair connects follows the
// addresses (Gloo compares them), so both orders run: in one of them rank 0 is the connecting side.
TEST(GlooCommunicator, ConnectReturnsOnNoRankBeforeASlowPeerHasConnected) {
  for (const auto& [address0, address1] : {std::pair{"127.0.0.2", "127.0.0.1"}, std::pair{"127.0.0.1", "127.0.0.2"}}) {
    auto server = RendezvousServer::Start("127.0.0.1", 0, 2, kGlooSecret);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    auto store0 = RendezvousClient::Connect("127.0.0.1", (*server)->port(), 0, kGlooSecret, std::chrono::seconds(20));
    auto store1 = RendezvousClient::Connect("127.0.0.1", (*server)->port(), 1, kGlooSecret, std::chrono::seconds(20));
    ASSERT_TRUE(store0.ok() && store1.ok());
    SlowToReadStore slow1(**store1, "slow/0", std::chrono::milliseconds(300));  // rank 1 reads rank 0's address late
    bool slow_peer_had_read = false;
    std::thread rank0([&] {
      auto comm = GlooCommunicator::Connect(**store0, 0, 2, {.bind_address = address0, .prefix = "slow"});
      ASSERT_TRUE(comm.ok()) << comm.status().ToString();
      slow_peer_had_read = slow1.read;
    });  // rank 0 leaves at once: its communicator closes
    auto comm1 = GlooCommunicator::Connect(slow1, 1, 2, {.bind_address = address1, .prefix = "slow"});
    rank0.join();
    EXPECT_TRUE(comm1.ok()) << "rank 0 on " << address0 << ": " << comm1.status().ToString();
    EXPECT_TRUE(slow_peer_had_read) << "rank 0 on " << address0 << " returned before rank 1 had its address";
  }
}

TEST(Rendezvous, NoLeaderIsAnErrorNamingTheAddressAndGetsWaitForSets) {
  auto none = RendezvousClient::Connect("127.0.0.1", 1, 0, kGlooSecret, std::chrono::milliseconds(200));
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(), HasSubstr("no leader at 127.0.0.1:1"));

  auto server = RendezvousServer::Start("127.0.0.1", 0, 2, kGlooSecret);
  ASSERT_TRUE(server.ok());
  auto a = RendezvousClient::Connect("127.0.0.1", (*server)->port(), 1, kGlooSecret, std::chrono::seconds(5));
  auto b = RendezvousClient::Connect("127.0.0.1", (*server)->port(), 0, kGlooSecret, std::chrono::seconds(5));
  ASSERT_TRUE(a.ok() && b.ok());
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_TRUE((*a)->Set("member/1", "llama-3-8b tp=2").ok());  // member 1's own key
  });
  auto value = (*b)->Get("member/1", std::chrono::seconds(5));  // waits for the set
  later.join();
  ASSERT_TRUE(value.ok()) << value.status().ToString();
  EXPECT_EQ(*value, "llama-3-8b tp=2");
  auto missing = (*b)->Get("member/9", std::chrono::milliseconds(100));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace tpserve
