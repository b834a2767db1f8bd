#include "benchmarks/comm_bench.h"

#include <gtest/gtest.h>

namespace tpserve {
namespace {

CommBenchOptions Small(const std::string& collective, int ranks) {
  CommBenchOptions o;
  o.collective = collective;
  o.ranks = ranks;
  o.min_bytes = 96;
  o.max_bytes = 400000;
  o.step_factor = 8;
  o.iters = 3;
  o.warmup = 1;
  o.check = 1;
  return o;
}

TEST(CommBench, EveryCollectiveChecksClean) {
  for (const char* collective : {"all_reduce", "all_gather", "reduce_scatter", "broadcast"}) {
    for (int ranks : {2, 3, 4}) {
      auto report = RunCommBench(Small(collective, ranks));
      ASSERT_TRUE(report.ok()) << report.status().ToString();
      ASSERT_FALSE(report->rows.empty());
      for (const auto& row : report->rows) {
        EXPECT_EQ(row.oop_wrong, 0u) << collective << " ranks " << ranks << " size " << row.bytes;
        EXPECT_EQ(row.ip_wrong, 0u) << collective << " ranks " << ranks << " size " << row.bytes;
        // busbw = algbw × factor (nccl-tests' definition).
        EXPECT_NEAR(row.oop_busbw, row.oop_algbw * BusBandwidthFactor(report->collective, ranks), 1e-9);
      }
    }
  }
}

TEST(CommBench, ACorruptedRankShowsUpInWrong) {
  for (const char* collective : {"all_reduce", "all_gather"}) {
    CommBenchOptions o = Small(collective, 3);
    o.corrupt_rank = 1;
    auto report = RunCommBench(o);
    ASSERT_TRUE(report.ok());
    for (const auto& row : report->rows) {
      EXPECT_GT(row.oop_wrong, 0u) << collective << " size " << row.bytes;
      EXPECT_GT(row.ip_wrong, 0u) << collective << " size " << row.bytes;
    }
  }
}

TEST(CommBench, UnsupportedOptionsAreNamed) {
  CommBenchOptions o = Small("all_reduce", 2);
  o.dtype = "half";
  EXPECT_NE(RunCommBench(o).status().message().find("-d 'half'"), std::string::npos);
  o = Small("all_to_all", 2);
  EXPECT_NE(RunCommBench(o).status().message().find("--collective 'all_to_all'"), std::string::npos);
  o = Small("all_reduce", 2);
  o.backend = "nccl";
  EXPECT_NE(RunCommBench(o).status().message().find("--backend 'nccl'"), std::string::npos);
}

}  // namespace
}  // namespace tpserve
