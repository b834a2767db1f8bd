#include <spdlog/spdlog.h>

#include <cstdio>
#include <optional>

#include "benchmarks/child_process.h"
#include "benchmarks/comm_bench.h"
#include "benchmarks/comm_sweep.h"
#include "cli/commands.h"
#include "common/bounded_json.h"
#include "planner/hardware_profile.h"

namespace tpserve {

void AddBenchCommCommand(CLI::App& app, CommandAction* action) {
  auto o = std::make_shared<CommBenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench-comm",
      "nccl-tests-compatible sweep of one collective (same flags, columns, algbw/busbw), with an\n"
      "alpha-beta fit: the message size below which the collective is latency-bound.");
  cmd->add_option("--collective", o->collective, "all_reduce | all_gather | reduce_scatter | broadcast")->capture_default_str();
  cmd->add_option("--backend", o->backend, "local (ranks as threads), nccl (one GPU per rank, NCCL_ALGO / NCCL_PROTO honoured), "
                  "rank-order (ranks sharing GPU 0), oneshot (each rank reads its peers' buffers; one GPU per "
                  "rank where there are enough, else sharing GPU 0)")->capture_default_str();
  cmd->add_option("--allreduce-table", o->allreduce_table,
                  "With --backend oneshot: also time NCCL at the same sizes (one GPU per rank) and write which "
                  "wins where into FILE, for serve --allreduce auto --allreduce-table FILE");
  cmd->add_option("--ranks,-g", o->ranks, "Ranks")->capture_default_str();
  cmd->add_option("--collective-timeout-ms", o->collective_timeout_ms,
                  "local: the timeout of every wait, as serve's (0: none, to measure what the timeouts cost)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  // Sizes take nccl-tests' suffixes: 8, 1K, 64M, 1G (K = 1024).
  cmd->add_option("-b,--minbytes", o->min_bytes, "Smallest size (bytes; K, M, G suffixes)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  cmd->add_option("-e,--maxbytes", o->max_bytes, "Largest size (bytes; K, M, G suffixes)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  cmd->add_option("-f,--stepfactor", o->step_factor, "Multiply the size by this each step")->capture_default_str();
  cmd->add_option("-i,--stepbytes", o->step_bytes, "Add this many bytes each step (overrides -f)")
      ->transform(CLI::AsSizeValue(false));
  cmd->add_option("-n,--iters", o->iters, "Timed iterations per size")->capture_default_str();
  cmd->add_option("-w,--warmup_iters", o->warmup, "Warm-up iterations per size")->capture_default_str();
  cmd->add_option("-c,--check", o->check, "Check results (#wrong)")->capture_default_str();
  cmd->add_option("-o,--op", o->op, "Reduction op (sum)")->capture_default_str();
  cmd->add_option("-d,--datatype", o->dtype, "Data type (float)")->capture_default_str();
  cmd->add_option("--peer", o->peer,
                  "mpi: also time Open MPI's collective (mpirun, same ranks, sizes, iterations) and print the ratio");
  cmd->add_option("--debug-corrupt-rank", o->corrupt_rank)->group("");  // tests: prove #wrong works
  cmd->add_option("--protocols", o->protocols,
                  "Sweep NCCL protocols (LL,LL128,Simple): one run per protocol x --algorithms value, each in its "
                  "own process with NCCL_PROTO / NCCL_ALGO set, beside NCCL's own choice")
      ->delimiter(',');
  cmd->add_option("--algorithms", o->algorithms, "Sweep NCCL algorithms (Ring,Tree,NVLS,...), with --protocols")
      ->delimiter(',');
  cmd->add_flag("--register", o->register_windows,
                "nccl: also run on buffers registered as symmetric windows (NCCL >= 2.27), and say from NCCL's "
                "debug output whether its symmetric kernels ran");
  cmd->add_option("--graph", o->graph,
                  "nccl: also time N calls captured in one CUDA graph, launched as one (nccl-tests -G N)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--hardware", o->hardware,
                  "A planner profile (preset name or file): busbw as % of its link peak, and the planner's prediction "
                  "for each size");
  cmd->add_option("--from", o->from, "Render a recorded bench-comm --json result (a sweep or one run) instead of measuring")
      ->check(CLI::ExistingFile);
  // One process per GPU, as NVIDIA measures (or torchrun's WORLD_SIZE / RANK / LOCAL_RANK /
  // MASTER_ADDR / MASTER_PORT); the leader prints.
  AddGroupFlags(cmd, &o->membership, &o->bind_address, &o->group_timeout_ms);
  cmd->add_flag("--one-run", o->one_run)->group("");  // a sweep's child process
  cmd->add_flag("--json", o->json, "Print one JSON object");
  cmd->add_option("--plot", o->plot, "Write a latency-vs-size chart (FILE.svg or FILE.png)");
  cmd->callback([o, action, cmd] {
    o->ranks_given = cmd->get_option("--ranks")->count() > 0;
    *action = [o] {
      std::optional<planner::HardwareProfile> hardware;
      if (!o->hardware.empty()) {
        auto loaded = planner::LoadHardwareProfile(o->hardware);
        if (!loaded.ok()) {
          spdlog::error("bench-comm: --hardware: {}", loaded.status().ToString());
          return 2;
        }
        hardware = std::move(*loaded);
      }
      const planner::HardwareProfile* profile = hardware ? &*hardware : nullptr;
      if (!o->from.empty() || IsCommSweep(*o)) {
        Result<CommSweepReport> sweep = Internal("unreached");
        if (!o->from.empty()) {
          auto value = ReadJsonFile(o->from);
          sweep = value.ok() ? ParseCommSweepJson(*value, o->from) : Result<CommSweepReport>(value.status());
        } else {
          sweep = RunCommSweep(*o, SelfExecutable());
        }
        if (!sweep.ok()) {
          spdlog::error("bench-comm: {}", sweep.status().ToString());
          return 1;
        }
        if (sweep->member != 0) {
          spdlog::info("bench-comm: member {}: every run of the sweep done; the leader prints the results", sweep->member);
          return 0;
        }
        std::printf("%s\n", o->json ? CommSweepJson(*sweep).dump().c_str() : FormatCommSweep(*sweep, profile).c_str());
        return WritePlotIfAsked("bench-comm", o->plot, [&] { return RenderSvg(CommSweepChart(*sweep, profile)); });
      }
      auto report = RunCommBench(*o);
      if (!report.ok()) {
        spdlog::error("bench-comm: {}", report.status().ToString());
        return 1;
      }
      if (report->member != 0) {  // one report per group: the leader's
        spdlog::info("bench-comm: member {} of {} (ranks {}..{}) done; the leader prints the results", report->member,
                     report->members, report->first_rank, report->first_rank + report->local_ranks - 1);
        return 0;
      }
      std::string text = o->json ? CommBenchJson(*report) : FormatCommBench(*report, *o);
      if (profile != nullptr && !o->json) text += FormatHardwareComparison(*report, *profile);
      std::printf("%s\n", text.c_str());
      return WritePlotIfAsked("bench-comm", o->plot, [&] { return RenderSvg(CommLatencyChart(*report)); });
    };
  });
}

}  // namespace tpserve
