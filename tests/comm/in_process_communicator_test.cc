// In-process collectives against naive loops, on more ranks than cores, on both AllReduce paths.
#include "comm/in_process_communicator.h"
#include "tests/comm/rank_data.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

namespace tpserve {
namespace {

// Runs fn(rank, communicator) on one thread per rank.
template <typename Fn>
void RunRanks(int world, Fn fn, InProcessCommunicator::Path path = InProcessCommunicator::Path::kAuto) {
  auto comms = InProcessCommunicator::CreateGroup(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    comms[r]->set_path(path);
    threads.emplace_back([&, r] { fn(r, *comms[r]); });
  }
  for (auto& t : threads) t.join();
}

using testing::RankData;

class AllReduceTest : public ::testing::TestWithParam<int> {};

TEST_P(AllReduceTest, SumsInRankOrderOnBothPaths) {
  const int world = GetParam();
  for (size_t count : {1ul, 5ul, 4096ul, 100001ul}) {
    // The contract: element i = (((r0 + r1) + r2) + ...) in float.
    std::vector<float> expected = RankData(0, count, 0);
    for (int r = 1; r < world; ++r) {
      auto d = RankData(r, count, 0);
      for (size_t i = 0; i < count; ++i) expected[i] += d[i];
    }
    for (auto path : {InProcessCommunicator::Path::kLatency, InProcessCommunicator::Path::kBandwidth,
                      InProcessCommunicator::Path::kAuto}) {
      std::vector<std::vector<float>> results(world);
      RunRanks(world, [&](int r, InProcessCommunicator& comm) {
        results[r] = RankData(r, count, 0);
        ASSERT_TRUE(comm.AllReduceSum(results[r].data(), count).ok());
      }, path);
      for (int r = 0; r < world; ++r) {
        ASSERT_EQ(0, std::memcmp(results[r].data(), expected.data(), count * sizeof(float)))
            << "world " << world << " count " << count << " rank " << r;
      }
    }
  }
}

TEST_P(AllReduceTest, ManyBackToBackCallsOfChangingSizes) {
  const int world = GetParam();
  // 70000 then 50000: a bandwidth-path call followed by a latency-path call with a larger chunk
  // (the scratch buffer grows while slower ranks may still read the previous result).
  const std::vector<size_t> sizes = {3, 70000, 50000, 1, 128, 90000, 17};
  std::vector<int> failures(world, 0);
  RunRanks(world, [&](int r, InProcessCommunicator& comm) {
    for (int call = 0; call < 60; ++call) {
      const size_t count = sizes[call % sizes.size()];
      std::vector<float> data = RankData(r, count, call);
      if (!comm.AllReduceSum(data.data(), count).ok()) ++failures[r];
      std::vector<float> expected = RankData(0, count, call);
      for (int q = 1; q < world; ++q) {
        auto d = RankData(q, count, call);
        for (size_t i = 0; i < count; ++i) expected[i] += d[i];
      }
      if (std::memcmp(data.data(), expected.data(), count * sizeof(float)) != 0) ++failures[r];
    }
  });
  for (int r = 0; r < world; ++r) EXPECT_EQ(failures[r], 0) << "rank " << r;
}

TEST_P(AllReduceTest, GatherScatterBroadcast) {
  const int world = GetParam();
  const size_t count = 1000;
  std::vector<std::vector<float>> gathered(world), scattered(world), broadcast(world);
  RunRanks(world, [&](int r, InProcessCommunicator& comm) {
    auto mine = RankData(r, count, 1);
    gathered[r].resize(count * world);
    ASSERT_TRUE(comm.AllGather(mine.data(), gathered[r].data(), count).ok());
    auto full = RankData(r, count * world, 2);
    scattered[r].resize(count);
    ASSERT_TRUE(comm.ReduceScatterSum(full.data(), scattered[r].data(), count).ok());
    broadcast[r] = RankData(r, count, 3);
    ASSERT_TRUE(comm.Broadcast(broadcast[r].data(), count, world - 1).ok());
    ASSERT_TRUE(comm.Barrier().ok());
  });
  for (int r = 0; r < world; ++r) {
    for (int q = 0; q < world; ++q) {
      auto theirs = RankData(q, count, 1);
      ASSERT_EQ(0, std::memcmp(&gathered[r][q * count], theirs.data(), count * sizeof(float)));
    }
    std::vector<float> expected(count);
    for (int q = 0; q < world; ++q) {
      auto full = RankData(q, count * world, 2);
      for (size_t i = 0; i < count; ++i) expected[i] = q == 0 ? full[r * count + i] : expected[i] + full[r * count + i];
    }
    ASSERT_EQ(0, std::memcmp(scattered[r].data(), expected.data(), count * sizeof(float)));
    auto root = RankData(world - 1, count, 3);
    ASSERT_EQ(0, std::memcmp(broadcast[r].data(), root.data(), count * sizeof(float)));
  }
}

// A rank that never arrives: its peers fail the collective after the timeout (not before, and not
// forever), and from then on every collective of every rank fails at once.
TEST(InProcessTimeouts, AStalledRankFailsItsPeersAfterTheTimeoutAndBreaksTheGroup) {
  auto comms = InProcessCommunicator::CreateGroup(3, std::chrono::milliseconds(300));
  std::vector<Status> first(3), later(3);
  std::vector<double> waited_ms(3);
  std::vector<std::thread> threads;
  // Timed from before either thread starts: the first caller's timeout breaks the group for both,
  // so a rank whose thread started late (ASan under ctest -j2: 60 ms) is released sooner after its
  // own call than the timeout, but never sooner than the timeout after this.
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < 2; ++r) {  // rank 2 stalls: it never calls
    threads.emplace_back([&, r] {
      std::vector<float> data(16, 1.0f);
      first[r] = comms[r]->AllReduceSum(data.data(), data.size());
      waited_ms[r] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      later[r] = comms[r]->AllReduceSum(data.data(), data.size());
    });
  }
  for (auto& t : threads) t.join();
  int timed_out = 0;
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(first[r].ok());
    timed_out += first[r].code() == StatusCode::kDeadlineExceeded ? 1 : 0;
    EXPECT_GE(waited_ms[r], 250.0) << "rank " << r << " gave up before the timeout";
    EXPECT_LT(waited_ms[r], 5000.0);
    EXPECT_EQ(later[r].code(), StatusCode::kUnavailable) << later[r].message();
  }
  EXPECT_GE(timed_out, 1);
  // The stalled rank, when it finally calls, learns that the group is gone.
  std::vector<float> data(16, 1.0f);
  EXPECT_EQ(comms[2]->AllReduceSum(data.data(), data.size()).code(), StatusCode::kUnavailable);
}

// Abort (a rank that failed on its own) releases peers already waiting, long before the timeout.
TEST(InProcessTimeouts, AbortReleasesWaitingPeersAtOnce) {
  auto comms = InProcessCommunicator::CreateGroup(2, std::chrono::milliseconds(60000));
  Status waiting;
  double waited_ms = 0;
  std::thread peer([&] {
    std::vector<float> data(8, 1.0f);
    const auto start = std::chrono::steady_clock::now();
    waiting = comms[0]->AllReduceSum(data.data(), data.size());
    waited_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  comms[1]->Abort();
  peer.join();
  EXPECT_EQ(waiting.code(), StatusCode::kUnavailable) << waiting.message();
  EXPECT_LT(waited_ms, 10000.0);
  EXPECT_NE(waiting.message().find("rank 0"), std::string::npos) << waiting.message();
}

// Without a timeout a slow peer is waited for, however slow (the default before this flag).
TEST(InProcessTimeouts, NoTimeoutWaitsForASlowPeer) {
  auto comms = InProcessCommunicator::CreateGroup(2);
  std::vector<float> a(4, 1.0f), b(4, 2.0f);
  Status status_a;
  std::thread fast([&] { status_a = comms[0]->AllReduceSum(a.data(), a.size()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  ASSERT_TRUE(comms[1]->AllReduceSum(b.data(), b.size()).ok());
  fast.join();
  ASSERT_TRUE(status_a.ok()) << status_a.message();
  EXPECT_EQ(a[0], 3.0f);
  EXPECT_EQ(b[0], 3.0f);
}

// 8 ranks on a 2-core machine must still be correct (they yield while waiting).
INSTANTIATE_TEST_SUITE_P(Worlds, AllReduceTest, ::testing::Values(1, 2, 3, 4, 8));

}  // namespace
}  // namespace tpserve
