// `tpserve bench-comm`: an nccl-tests-compatible sweep of one collective — same flags (-b -e -f -i
// -n -w -c -o -d), same columns, same algbw/busbw — plus the α–β fit of comm/cost_model over the
// sweep. Backends: local (the in-process communicator, ranks as threads), and through the CUDA
// module nccl (one GPU per rank), rank-order (ranks sharing GPU 0; AllReduce and AllGather) and
// oneshot (AllReduce; one GPU per rank where there are enough, else ranks sharing GPU 0).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "benchmarks/svg_chart.h"
#include "comm/cost_model.h"
#include "comm/group_membership.h"
#include "common/status.h"

namespace tpserve {

struct CommBenchOptions {
  std::string collective = "all_reduce";
  std::string backend = "local";
  int ranks = 2;
  int collective_timeout_ms = 60000;  // local: every wait's timeout, as the engine's (0: none)
  size_t min_bytes = 8;             // -b
  size_t max_bytes = 64 << 20;      // -e
  double step_factor = 2;           // -f
  size_t step_bytes = 0;            // -i (overrides -f when > 0)
  int iters = 20;                   // -n
  int warmup = 5;                   // -w
  int check = 1;                    // -c
  std::string op = "sum";           // -o
  std::string dtype = "float";      // -d
  std::string peer;                 // "mpi": time MPI's collective over the same sizes too
  // --allreduce-table FILE (--backend oneshot): also time NCCL at the same sizes and write which
  // wins where into FILE, the table `serve --allreduce auto` reads (comm/allreduce_choice.h).
  std::string allreduce_table;
  int corrupt_rank = -1;            // fault injection for tests: this rank's input is off by one
  bool json = false;
  std::string plot;                 // --plot FILE.svg|png
  // A sweep over NCCL's paths (benchmarks/comm_sweep.h): NCCL_PROTO and NCCL_ALGO values, and
  // --register (buffers registered as symmetric windows, NCCL >= 2.27; with --one-run: this run).
  std::vector<std::string> protocols, algorithms;
  bool register_windows = false;
  bool one_run = false;             // a sweep's child: run these options once, whatever the above
  // --graph N (nccl): also time N calls captured in one CUDA graph, launched as one (nccl-tests -G).
  int graph = 0;
  std::string hardware;             // --hardware PRESET|PROFILE: % of link peak, the planner's prediction
  std::string from;                 // --from FILE: render a recorded --json result instead of measuring
  // Several processes, one per GPU as NVIDIA measures (--nnodes / --node-rank / --rendezvous, or
  // torchrun's variables: comm/group_membership.h): each runs its share of the ranks (local: over
  // Gloo; nccl: joined through the leader's ncclUniqueId); the leader prints the results.
  MembershipFlags membership;
  bool ranks_given = false;         // --ranks on the command line (else torchrun's WORLD_SIZE sets it)
  std::string bind_address = "127.0.0.1";
  int group_timeout_ms = 30000;
};

struct CommBenchRow {
  size_t bytes = 0, count = 0;
  double oop_us = 0, oop_algbw = 0, oop_busbw = 0;
  size_t oop_wrong = 0;
  double ip_us = 0, ip_algbw = 0, ip_busbw = 0;
  size_t ip_wrong = 0;
  double peer_us = 0;  // the peer's time at this size (0: no peer)
  size_t peer_wrong = 0;
  double graph_us = 0;  // --graph: per call, N calls in one CUDA graph (0: not measured)
};

struct CommBenchReport {
  Collective collective = Collective::kAllReduce;
  int ranks = 0;
  std::string backend = "local";  // local | nccl | rank-order | oneshot
  std::string library;            // device backends: "nccl 2.28.3 (NCCL_ALGO=default, ...)", "rank-order"
  std::string placement;          // device backends: "one GPU per rank", "ranks sharing cuda:0"
  std::string device;             // device backends: the GPU's name
  std::vector<CommBenchRow> rows;
  AlphaBeta fit;
  bool fitted = false;
  std::string peer;          // "", "mpi", or "nccl" (--allreduce-table)
  std::string peer_library;  // e.g. "Open MPI v4.1.4"
  std::string peer_command;
  int members = 1;           // processes (multi-process runs)
  int member = 0;            // this one; 0 is the leader, which prints
  int first_rank = 0;        // this process's ranks: first_rank .. + local_ranks - 1
  int local_ranks = 0;       // (whose times and #wrong the report holds)
};

const char* PeerCollectiveName(Collective c);  // "MPI_Allreduce", ...

Result<CommBenchReport> RunCommBench(const CommBenchOptions& options);
// Which processes take part (one unless --nnodes or torchrun's variables say otherwise): the
// group's rank count is --ranks when given, else WORLD_SIZE.
Result<GroupMembership> ResolveCommBenchMembership(const CommBenchOptions& options);
// "local (threads)", "nccl 2.28.3 (...), one GPU per rank", "local, Gloo over TCP across 2 ...".
std::string DescribeBackend(const CommBenchReport& report);
std::string FormatCommBench(const CommBenchReport& report, const CommBenchOptions& options);
std::string CommBenchJson(const CommBenchReport& report);
nlohmann::json CommBenchJsonValue(const CommBenchReport& report);
// bench-comm --json output back into a report (errors name `source`).
Result<CommBenchReport> ParseCommBenchJson(const nlohmann::json& value, const std::string& source);
// Latency vs message size (log-log): out-of-place, in-place, the peer, and the fitted α–β model.
LineChart CommLatencyChart(const CommBenchReport& report);

}  // namespace tpserve
