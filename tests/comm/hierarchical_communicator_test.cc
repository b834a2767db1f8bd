// N members × L ranks through the hierarchical communicator against TP = N·L in one process
// (the in-process communicator), bitwise, on every collective; and failures reach every rank.
#include "comm/hierarchical_communicator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>

#include "comm/in_process_communicator.h"
#include "tests/comm/rank_data.h"

namespace tpserve {
namespace {

using testing::RankData;

// [global rank] communicators: `members` members of `local` ranks, the members joined in-process.
std::vector<std::unique_ptr<Communicator>> MakeHierarchy(int members, int local) {
  auto across = InProcessCommunicator::CreateGroup(members);
  std::vector<std::unique_ptr<Communicator>> ranks;
  for (int m = 0; m < members; ++m) {
    for (auto& rank : HierarchicalCommunicator::CreateGroup(std::move(across[m]), local, std::chrono::seconds(30))) {
      ranks.push_back(std::move(rank));
    }
  }
  return ranks;
}

std::vector<std::unique_ptr<Communicator>> MakeFlat(int world) {
  std::vector<std::unique_ptr<Communicator>> ranks;
  for (auto& rank : InProcessCommunicator::CreateGroup(world)) ranks.push_back(std::move(rank));
  return ranks;
}

// Every collective, several sizes, back to back; what each rank ends up with, concatenated.
std::vector<std::vector<float>> RunEverything(std::vector<std::unique_ptr<Communicator>>& comms) {
  const int world = static_cast<int>(comms.size());
  std::vector<std::vector<float>> seen(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      Communicator& comm = *comms[r];
      EXPECT_EQ(comm.rank(), r);
      EXPECT_EQ(comm.world_size(), world);
      auto keep = [&](const std::vector<float>& v) { seen[r].insert(seen[r].end(), v.begin(), v.end()); };
      int call = 0;
      for (size_t count : {1ul, 5ul, 4096ul, 70001ul}) {
        auto data = RankData(r, count, ++call);
        EXPECT_TRUE(comm.AllReduceSum(data.data(), count).ok());
        keep(data);
        auto input = RankData(r, count, ++call);
        std::vector<float> gathered(world * count);
        EXPECT_TRUE(comm.AllGather(input.data(), gathered.data(), count).ok());
        keep(gathered);
        auto whole = RankData(r, world * count, ++call);
        std::vector<float> chunk(count);
        EXPECT_TRUE(comm.ReduceScatterSum(whole.data(), chunk.data(), count).ok());
        keep(chunk);
        for (int root = 0; root < world; ++root) {
          auto b = RankData(r, count, ++call);
          EXPECT_TRUE(comm.Broadcast(b.data(), count, root).ok());
          keep(b);
        }
        EXPECT_TRUE(comm.Barrier().ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  return seen;
}

class Hierarchy : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(Hierarchy, EveryCollectiveEqualsOneProcessBitwise) {
  const auto [members, local] = GetParam();
  auto hierarchy = MakeHierarchy(members, local);
  auto flat = MakeFlat(members * local);
  const auto got = RunEverything(hierarchy);
  const auto expected = RunEverything(flat);
  for (int r = 0; r < members * local; ++r) {
    ASSERT_EQ(got[r].size(), expected[r].size());
    EXPECT_EQ(0, std::memcmp(got[r].data(), expected[r].data(), got[r].size() * sizeof(float)))
        << members << " members × " << local << " ranks: rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Hierarchy,
                         ::testing::Values(std::pair{1, 2}, std::pair{2, 1}, std::pair{2, 2}, std::pair{2, 4},
                                           std::pair{4, 2}, std::pair{3, 1}));

// A member-level communicator that fails (a peer process gone): every local rank gets its error.
class FailingAcross final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 2; }
  Status AllReduceSum(float*, size_t) override { return Fail(); }
  Status AllGather(const float*, float*, size_t) override { return Fail(); }
  Status ReduceScatterSum(const float*, float*, size_t) override { return Fail(); }
  Status Broadcast(float*, size_t, int) override { return Fail(); }
  Status Barrier() override { return Fail(); }
  void Abort() override { aborted = true; }
  bool aborted = false;

 private:
  static Status Fail() { return Status(StatusCode::kUnavailable, "member 1 is gone"); }
};

TEST(HierarchyFailure, AnErrorAcrossMembersReachesEveryLocalRankAndAbortReachesAcross) {
  auto failing = std::make_unique<FailingAcross>();
  FailingAcross* across = failing.get();
  auto ranks = HierarchicalCommunicator::CreateGroup(std::move(failing), 3, std::chrono::seconds(30));
  std::vector<Status> statuses(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      std::vector<float> data(10, 1.0f);
      statuses[r] = ranks[r]->AllReduceSum(data.data(), data.size());
    });
  }
  for (auto& t : threads) t.join();
  for (const Status& s : statuses) {
    EXPECT_EQ(s.code(), StatusCode::kUnavailable);
    EXPECT_EQ(s.message(), "member 1 is gone");
  }
  ranks[0]->Abort();
  EXPECT_TRUE(across->aborted);
}

}  // namespace
}  // namespace tpserve
