#include "benchmarks/comm_bench.h"
#include "kernels/cuda_module.h"
#include "benchmarks/comm_peer.h"

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
  o.backend = "gloo";
  EXPECT_NE(RunCommBench(o).status().message().find("--backend 'gloo'"), std::string::npos);
  o = Small("broadcast", 2);
  o.backend = "nccl";
  EXPECT_NE(RunCommBench(o).status().message().find("all_reduce and all_gather"), std::string::npos);
  o = Small("all_gather", 2);
  o.backend = "oneshot";
  EXPECT_NE(RunCommBench(o).status().message().find("--backend oneshot runs all_reduce"), std::string::npos);
  // The table compares one-shot with NCCL: it needs both.
  o = Small("all_reduce", 2);
  o.allreduce_table = "table.json";
  EXPECT_NE(RunCommBench(o).status().message().find("--allreduce-table compares one-shot with NCCL"),
            std::string::npos);
}

TEST(CommBench, DeviceBackendsWithoutAUsableGpuSayWhy) {
  auto probe = ProbeCudaBackend();
  if (probe.ok()) GTEST_SKIP() << "a GPU is usable here; the device check runs the device backends";
  for (const char* backend : {"nccl", "rank-order", "oneshot"}) {
    CommBenchOptions o = Small("all_reduce", 2);
    o.backend = backend;
    auto report = RunCommBench(o);
    ASSERT_FALSE(report.ok()) << backend;
    EXPECT_EQ(report.status().message(), probe.status().message()) << backend;
  }
}

TEST(CommBench, UnknownPeerIsNamed) {
  CommBenchOptions o = Small("all_reduce", 2);
  o.peer = "gloo";
  EXPECT_NE(RunCommBench(o).status().message().find("--peer 'gloo'"), std::string::npos);
}

TEST(MpiPeer, ReadsTheLastResultLineAndRejectsOthers) {
  auto sweep = ParseMpiPeerOutput(
      "notice: something from mpirun\n{\"library\": \"Open MPI v4.1.4\", \"ranks\": 2, \"rows\": "
      "[{\"size\": 1024, \"time_us\": 1.5, \"wrong\": 0}, {\"size\": 4096, \"time_us\": 3.25, \"wrong\": 2}]}\n"
      "notice: printed after the result\n");
  ASSERT_TRUE(sweep.ok()) << sweep.status().ToString();
  EXPECT_EQ(sweep->library, "Open MPI v4.1.4");
  ASSERT_EQ(sweep->rows.size(), 2u);
  EXPECT_EQ(sweep->rows[1].bytes, 4096u);
  EXPECT_DOUBLE_EQ(sweep->rows[1].time_us, 3.25);
  EXPECT_EQ(sweep->rows[1].wrong, 2u);
  EXPECT_FALSE(ParseMpiPeerOutput("mpirun noticed that process rank 1 exited\n").ok());
  EXPECT_FALSE(ParseMpiPeerOutput("{\"rows\": 3}\n").ok());
}

#if TPSERVE_TEST_HAVE_MPI
// The real thing: mpirun starts tpserve-mpi-peer, whose own check must find every element right,
// for every collective, and whose times land on the rows of the same sizes.
TEST(MpiPeer, EveryCollectiveRunsUnderMpirunAndChecksClean) {
  for (const char* collective : {"all_reduce", "all_gather", "reduce_scatter", "broadcast"}) {
    for (int ranks : {2, 3}) {
      CommBenchOptions o = Small(collective, ranks);
      o.peer = "mpi";
      auto report = RunCommBench(o);
      ASSERT_TRUE(report.ok()) << report.status().ToString();
      EXPECT_EQ(report->peer, "mpi");
      EXPECT_NE(report->peer_library.find("MPI"), std::string::npos) << report->peer_library;
      EXPECT_NE(report->peer_command.find("-np " + std::to_string(ranks)), std::string::npos);
      for (const auto& row : report->rows) {
        EXPECT_GT(row.peer_us, 0) << collective << " ranks " << ranks << " size " << row.bytes;
        EXPECT_EQ(row.peer_wrong, 0u) << collective << " ranks " << ranks << " size " << row.bytes;
      }
      const std::string text = FormatCommBench(*report, o);
      EXPECT_NE(text.find(std::string("# peer: ") + PeerCollectiveName(report->collective)), std::string::npos);
    }
  }
}
#endif

}  // namespace
}  // namespace tpserve
