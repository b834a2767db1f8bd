#include "benchmarks/comm_sweep.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sstream>
#include <thread>

#include "benchmarks/child_process.h"
#include "kernels/cuda_module.h"
#include "planner/calibrate.h"
#include "planner/collective_model.h"
#include "planner/hardware_profile.h"
#include "tests/test_paths.h"

namespace tpserve {
namespace {

using ::testing::HasSubstr;

CommBenchOptions SmallSweep() {
  CommBenchOptions o;
  o.ranks = 2;
  o.min_bytes = 64;
  o.max_bytes = 4096;
  o.step_factor = 8;
  o.iters = 3;
  o.warmup = 1;
  o.protocols = {"LL", "simple"};
  o.algorithms = {"Ring", "tree"};
  return o;
}

// The table's line for `bytes` (its first field).
std::string TableLine(const std::string& table, size_t bytes) {
  std::istringstream lines(table);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string first;
    fields >> first;
    if (first == std::to_string(bytes)) return line;
  }
  return "";
}

// Every run of a sweep is a process of its own (the real tpserve binary), with the local backend:
// the sweep, its table and its JSON, end to end on the CPU.
TEST(CommSweep, EveryCombinationRunsInItsOwnProcess) {
  const CommBenchOptions o = SmallSweep();
  ASSERT_TRUE(IsCommSweep(o));
  auto sweep = RunCommSweep(o, testing::TpserveBinary());
  ASSERT_TRUE(sweep.ok()) << sweep.status().ToString();
  std::vector<std::string> labels;
  for (const CommSweepRun& run : sweep->runs) labels.push_back(run.label);
  // NCCL's spelling, whatever the flag's; auto first.
  EXPECT_THAT(labels,
              ::testing::ElementsAre("auto", "Ring/LL", "Tree/LL", "Ring/Simple", "Tree/Simple"));
  for (const CommSweepRun& run : sweep->runs) {
    ASSERT_TRUE(run.result.has_value()) << run.label << ": " << run.error;
    ASSERT_EQ(run.result->rows.size(), 3u) << run.label;  // 64, 512, 4096
    for (const CommBenchRow& row : run.result->rows) EXPECT_EQ(row.oop_wrong, 0u) << run.label;
    EXPECT_TRUE(run.tuning.empty()) << "the local backend runs no NCCL";
  }
  const std::string table = FormatCommSweep(*sweep, nullptr);
  EXPECT_THAT(table, HasSubstr("NCCL_ALGO and NCCL_PROTO change nothing here"));
  // Each size's fastest run is the one with the smallest time in the runs' results.
  for (size_t bytes : {64u, 512u, 4096u}) {
    const CommSweepRun* fastest = nullptr;
    double best = 1e300;
    for (const CommSweepRun& run : sweep->runs) {
      for (const CommBenchRow& row : run.result->rows) {
        if (row.bytes == bytes && row.oop_us < best) {
          best = row.oop_us;
          fastest = &run;
        }
      }
    }
    const std::string line = TableLine(table, bytes);
    ASSERT_FALSE(line.empty()) << table;
    std::istringstream fields(line);
    std::vector<std::string> f;
    for (std::string field; fields >> field;) f.push_back(field);
    ASSERT_EQ(f.size(), 1 + 5 + 2u) << line;  // size, five runs, fastest, tuner's pick
    EXPECT_EQ(f[6], fastest->label) << line;
    EXPECT_EQ(f[7], "-") << line;
  }
  // The chart: a line per run.
  EXPECT_EQ(CommSweepChart(*sweep, nullptr).series.size(), 5u);
}

TEST(CommSweep, BadCombinationsAreNamed) {
  CommBenchOptions o = SmallSweep();
  o.protocols = {"LL", "LL256"};
  EXPECT_THAT(RunCommSweep(o, testing::TpserveBinary()).status().message(),
              HasSubstr("--protocols 'LL256': NCCL knows LL, LL128, Simple"));
  o = SmallSweep();
  o.algorithms = {"Butterfly"};
  EXPECT_THAT(RunCommSweep(o, testing::TpserveBinary()).status().message(),
              HasSubstr("--algorithms 'Butterfly'"));
  o = SmallSweep();
  o.register_windows = true;
  EXPECT_THAT(RunCommSweep(o, testing::TpserveBinary()).status().message(),
              HasSubstr("--register"));
  o = SmallSweep();
  o.backend = "rank-order";
  EXPECT_THAT(RunCommSweep(o, testing::TpserveBinary()).status().message(),
              HasSubstr("need --backend nccl"));
  // --graph and --register outside a sweep need NCCL too.
  CommBenchOptions single;
  single.graph = 10;
  EXPECT_THAT(RunCommBench(single).status().message(), HasSubstr("--graph captures NCCL's calls"));
}

// A failed combination (here: a child that cannot start) is reported, and the others still run.
TEST(CommSweep, ARunThatFailsIsReportedNotFatal) {
  const CommBenchOptions o = SmallSweep();
  auto sweep = RunCommSweep(o, "/nonexistent/tpserve");
  ASSERT_FALSE(sweep.ok());
  EXPECT_THAT(sweep.status().message(), HasSubstr("every run of the sweep failed"));
}

// Fixed inputs, hand-computed: 8 ranks of an H200 node (the preset: 18 NVLinks × 20.6 GB/s).
nlohmann::json FixedSweep() {
  auto row = [](size_t bytes, double us) {
    return nlohmann::json{{"size", bytes},
                          {"count", bytes / 4},
                          {"out_of_place", {{"time_us", us}, {"wrong", 0}}},
                          {"in_place", {{"time_us", us}, {"wrong", 0}}}};
  };
  // 8 B, 64 B and 1 MiB.
  auto result = [&](double us8, double us64, double us1m) {
    return nlohmann::json{{"collective", "all_reduce"},
                          {"backend", "nccl"},
                          {"ranks", 8},
                          {"library", "nccl 2.28.3"},
                          {"placement", "one GPU per rank"},
                          {"device", "NVIDIA H200"},
                          {"rows", {row(8, us8), row(64, us64), row(1048576, us1m)}}};
  };
  auto tuning = [](size_t bytes, const char* algorithm, const char* protocol, bool symmetric) {
    return nlohmann::json{{"collective", "AllReduce"},
                          {"bytes", bytes},
                          {"algorithm", algorithm},
                          {"protocol", protocol},
                          {"symmetric", symmetric}};
  };
  return {
      {"sweep",
       {{"collective", "all_reduce"},
        {"backend", "nccl"},
        {"ranks", 8},
        {"iters", 20},
        {"graph", 0},
        {"runs",
         {{{"label", "auto"},
           {"algorithm", ""},
           {"protocol", ""},
           {"registered", false},
           {"result", result(20.0, 20.028, 12.0)},
           {"tuning", {tuning(8, "Ring", "LL", false), tuning(1048576, "NVLS", "Simple", false)}}},
          {{"label", "Ring/LL"},
           {"algorithm", "Ring"},
           {"protocol", "LL"},
           {"registered", false},
           {"result", result(18.0, 18.056, 40.0)},
           {"tuning", nlohmann::json::array()}},
          {{"label", "NVLS/LL"},
           {"algorithm", "NVLS"},
           {"protocol", "LL"},
           {"registered", false},
           {"result", nullptr},
           {"error", "exit 1: NCCL invalid usage"},
           {"tuning", nlohmann::json::array()}},
          {{"label", "auto+sym"},
           {"algorithm", ""},
           {"protocol", ""},
           {"registered", true},
           {"result", result(10.0, 10.0, 10.0)},
           {"tuning", {tuning(8, "", "", true), tuning(1048576, "NVLS", "Simple", false)}}}}}}}};
}

TEST(CommSweep, ARecordedSweepRendersWithTheLinkPeakAndThePlanner) {
  auto sweep = ParseCommSweepJson(FixedSweep(), "fixed.json");
  ASSERT_TRUE(sweep.ok()) << sweep.status().ToString();
  auto h200 = planner::LoadHardwareProfile("h200-sxm");
  ASSERT_TRUE(h200.ok());
  const std::string table = FormatCommSweep(*sweep, &*h200);
  EXPECT_THAT(table, HasSubstr("link peak 370.8 GB/s per GPU"));  // 18 x 20.6
  // 8 B: auto+sym fastest at 10 us; NCCL's tuner picked Ring/LL. busbw = 8 B / 10 us x 2 x 7 / 8
  // = 0.0014 GB/s, 0.0% of 370.8. The planner: ring/LL, 6.6 + 14 steps x 0.6 us = 15.00 us.
  const std::string small = TableLine(table, 8);
  EXPECT_THAT(small, HasSubstr("auto+sym"));
  EXPECT_THAT(small, HasSubstr("Ring/LL"));
  EXPECT_THAT(small, HasSubstr("0.0%"));
  EXPECT_THAT(small, HasSubstr("15.00"));
  // 1 MiB: auto+sym at 10 us: algbw 104.86 GB/s, busbw x 1.75 = 183.50 GB/s = 49.5% of 370.8.
  const std::string large = TableLine(table, 1048576);
  EXPECT_THAT(large, HasSubstr("NVLS/Simple"));  // the tuner's pick
  EXPECT_THAT(large, HasSubstr("183.50"));
  EXPECT_THAT(large, HasSubstr("49.5%"));
  // The planner on each run's own path: NCCL's ring/LL model at 8 B is the same 15.00 us (the
  // symmetric kernels are not modelled: "-").
  const size_t per_path = table.find("# the planner on each run's path");
  ASSERT_NE(per_path, std::string::npos);
  const std::string per_path_small = TableLine(table.substr(per_path), 8);
  EXPECT_THAT(per_path_small, ::testing::MatchesRegex(" *8 +15.00 +15.00 +-"));
  // The failed combination, and what NCCL's lines say about the symmetric kernels.
  EXPECT_THAT(table, HasSubstr("# NVLS/LL did not run: exit 1: NCCL invalid usage"));
  EXPECT_THAT(table,
              HasSubstr("# auto+sym: the symmetric kernels ran at 1 of 3 sizes (8 B .. 8 B)"));
  // Rendering the JSON of the parsed sweep gives the same table (what --from does with --json's
  // output).
  auto again = ParseCommSweepJson(CommSweepJson(*sweep), "again.json");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(FormatCommSweep(*again, &*h200), table);
  // The chart: the three runs that measured, and the planner's line.
  const LineChart chart = CommSweepChart(*sweep, &*h200);
  ASSERT_EQ(chart.series.size(), 4u);
  EXPECT_EQ(chart.series.back().label, "planner (h200-sxm)");
}

TEST(CommSweep, ASingleRunComparesWithTheHardware) {
  auto single = ParseCommBenchJson(FixedSweep()["sweep"]["runs"][0]["result"], "one.json");
  ASSERT_TRUE(single.ok()) << single.status().ToString();
  auto h200 = planner::LoadHardwareProfile("h200-sxm");
  ASSERT_TRUE(h200.ok());
  const std::string text = FormatHardwareComparison(*single, *h200);
  // 1 MiB in 12 us: busbw 1048576 / 12e-6 / 1e9 x 1.75 = 152.92 GB/s = 41.2% of 370.8.
  EXPECT_THAT(TableLine(text, 1048576), HasSubstr("152.92"));
  EXPECT_THAT(TableLine(text, 1048576), HasSubstr("41.2%"));
  // 8 B in 20 us against the planner's 15.00 us.
  EXPECT_THAT(TableLine(text, 8), HasSubstr("1.33x"));
}

TEST(CommSweep, RecordedFilesThatAreNotSweepsAreNamed) {
  EXPECT_THAT(
      ParseCommSweepJson(nlohmann::json{{"sweep", {{"collective", "all_reduce"}}}}, "bad.json")
          .status()
          .message(),
      HasSubstr("bad.json: not bench-comm --json output"));
  nlohmann::json negative = FixedSweep();
  negative["sweep"]["runs"][0]["result"]["rows"][0]["out_of_place"]["time_us"] = -1;
  EXPECT_THAT(ParseCommSweepJson(negative, "neg.json").status().message(),
              HasSubstr("out_of_place.time_us must be > 0"));
}

// plan calibrate --bench-comm on a sweep: one fit per path, and the planner uses the path's own
// fit when asked for that path (NCCL's choice otherwise).
TEST(CommSweep, CalibrationFitsEveryPathOfASweep) {
  auto runs = planner::ParseBenchCommFile(FixedSweep(), "sweep.json");
  ASSERT_TRUE(runs.ok()) << runs.status().ToString();
  ASSERT_EQ(runs->size(), 2u);  // auto and Ring/LL (the failed and the registered runs left out)
  EXPECT_EQ((*runs)[1].algorithm, "Ring");
  EXPECT_EQ((*runs)[1].protocol, "LL");
  auto h200 = planner::LoadHardwareProfile("h200-sxm");
  ASSERT_TRUE(h200.ok());
  for (const planner::CommSamples& samples : *runs) {
    auto fits = planner::FitCollective(samples);
    ASSERT_TRUE(fits.ok()) << fits.status().ToString();
    ASSERT_EQ(fits->size(), 1u);  // 8 B and 64 B below 64 KiB; 1 MiB alone in its range
    for (const planner::CollectiveFit& fit : *fits) h200->collective_fits.push_back(fit);
  }
  // Ring/LL: 18.0 us at 8 B, 18.056 at 64: 56 B per 0.056 us = 1 GB/s, alpha 18.0 - 0.008 = 17.992;
  // at 2048 B: 17.992 + 2.048 = 20.04 us. NCCL's choice (auto): 2 GB/s, alpha 19.996: 21.02 us.
  auto ring_ll =
      planner::EstimateCollective(*h200, Collective::kAllReduce, 8, 2048, {"ring", "LL"});
  ASSERT_TRUE(ring_ll.ok()) << ring_ll.status().ToString();
  EXPECT_NEAR(ring_ll->time_us, 20.04, 1e-6);
  EXPECT_EQ(ring_ll->algorithm, "fit");
  auto automatic = planner::EstimateCollective(*h200, Collective::kAllReduce, 8, 2048);
  ASSERT_TRUE(automatic.ok());
  EXPECT_NEAR(automatic->time_us, 21.02, 1e-6);
  // A path without a fit takes the model's; one the fabric lacks is NotFound.
  auto tree_ll = planner::EstimateCollective(*h200, Collective::kAllReduce, 8, 8, {"Tree", "LL"});
  ASSERT_TRUE(tree_ll.ok());
  EXPECT_NEAR(tree_ll->time_us, 6.8 + 2 * 7 * 0.6, 1e-3);  // NCCL's tree/LL latency on NVLink
  EXPECT_EQ(planner::EstimateCollective(*h200, Collective::kAllReduce, 8, 8, {"NVLS", "LL"})
                .status()
                .code(),
            StatusCode::kNotFound);
}

// A loopback port nothing listens on now (the OS's pick; it could be taken again before use).
int UnusedPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

// Two tpserve processes, one rank each, meet on loopback (--nnodes / --node-rank / --rendezvous,
// as serve's multi-process TP): the follower prints nothing, the leader the group's results. Then
// the same as a two-combination sweep, whose combinations meet anew on the same port.
TEST(CommSweep, OneProcessPerRankAcrossProcesses) {
  const std::string rendezvous = "127.0.0.1:" + std::to_string(UnusedPort());
  // clang-format off
  const std::vector<std::string> common = {"bench-comm", "--ranks", "2", "-b", "8", "-e", "4096", "-f", "8",
                                           "-n", "3", "-w", "1", "--nnodes", "2", "--rendezvous", rendezvous,
                                           "--group-timeout-ms", "20000"};
  // clang-format on
  auto run_pair = [&](const std::vector<std::string>& extra) {
    auto member = [&](int index) {
      std::vector<std::string> argv = {testing::TpserveBinary()};
      argv.insert(argv.end(), common.begin(), common.end());
      argv.insert(argv.end(), {"--node-rank", std::to_string(index)});
      argv.insert(argv.end(), extra.begin(), extra.end());
      const std::string stem = ::testing::TempDir() + "member" + std::to_string(index);
      return RunChild(argv, {}, stem + ".out", stem + ".err");
    };
    Result<ChildOutput> follower = Internal("not run");
    std::thread follower_thread([&] { follower = member(1); });
    Result<ChildOutput> leader = member(0);
    follower_thread.join();
    return std::make_pair(std::move(leader), std::move(follower));
  };

  auto [leader, follower] = run_pair({"--json"});
  ASSERT_TRUE(leader.ok() && follower.ok());
  ASSERT_EQ(leader->exit_code, 0) << leader->err;
  ASSERT_EQ(follower->exit_code, 0) << follower->err;
  EXPECT_EQ(follower->out, "");
  auto value = nlohmann::json::parse(leader->out);
  auto report = ParseCommBenchJson(value, "leader");
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->ranks, 2);
  EXPECT_EQ(report->members, 2);
  EXPECT_EQ(report->local_ranks, 1);
  ASSERT_EQ(report->rows.size(), 4u);  // 8, 64, 512, 4096
  for (const CommBenchRow& row : report->rows) {
    EXPECT_EQ(row.oop_wrong, 0u);  // each rank's sum holds the other process's input
    EXPECT_EQ(row.ip_wrong, 0u);
  }

  auto [sweep_leader, sweep_follower] =
      run_pair({"--protocols", "LL", "--algorithms", "Ring", "--json"});
  ASSERT_TRUE(sweep_leader.ok() && sweep_follower.ok());
  ASSERT_EQ(sweep_leader->exit_code, 0) << sweep_leader->err;
  ASSERT_EQ(sweep_follower->exit_code, 0) << sweep_follower->err;
  auto sweep = ParseCommSweepJson(nlohmann::json::parse(sweep_leader->out), "sweep");
  ASSERT_TRUE(sweep.ok()) << sweep.status().ToString();
  ASSERT_EQ(sweep->runs.size(), 2u);
  for (const CommSweepRun& run : sweep->runs) {
    ASSERT_TRUE(run.result.has_value()) << run.label << ": " << run.error;
    EXPECT_EQ(run.result->members, 2) << run.label;
  }
}

TEST(CommSweep, TwoCombinationSweepOnOneGpu) {
  if (!ProbeCudaBackend().ok())
    GTEST_SKIP() << "no usable GPU here: the device check runs this sweep";
  CommBenchOptions o = SmallSweep();
  o.backend = "nccl";
  o.ranks = 1;
  o.protocols = {"LL", "Simple"};
  o.algorithms = {"Ring"};
  o.graph = 5;
  auto sweep = RunCommSweep(o, testing::TpserveBinary());
  ASSERT_TRUE(sweep.ok()) << sweep.status().ToString();
  ASSERT_EQ(sweep->runs.size(), 3u);
  for (const CommSweepRun& run : sweep->runs) {
    ASSERT_TRUE(run.result.has_value()) << run.label << ": " << run.error;
    for (const CommBenchRow& row : run.result->rows) {
      EXPECT_EQ(row.oop_wrong, 0u);
      EXPECT_GT(row.graph_us, 0) << run.label;
    }
  }
}

}  // namespace
}  // namespace tpserve
