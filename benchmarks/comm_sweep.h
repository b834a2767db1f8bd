// `tpserve bench-comm --protocols LL,LL128,Simple --algorithms Ring,Tree,NVLS [--register]`: one
// bench-comm run per NCCL_PROTO × NCCL_ALGO combination, each in a process of its own (NCCL reads
// both when a communicator starts, and they would otherwise leak from one combination into the
// next), plus "auto", NCCL's own choice, whose debug output (NCCL_DEBUG_SUBSYS=TUNING) says which
// path the tuner picked at each size, and with --register "auto+sym": the same on buffers
// registered as symmetric windows, whose debug output says whether the symmetric kernels ran.
// One table (a column per combination, the fastest at each size, the tuner's pick), one chart (a
// line per combination) and one JSON; `--from FILE` renders a recorded JSON again (with another
// --hardware, say). With --hardware PRESET|PROFILE (the planner's profiles) each size also gets
// busbw as a percentage of the link's peak and the planner's prediction beside the measurement.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "benchmarks/comm_bench.h"
#include "benchmarks/nccl_tuning_log.h"
#include "benchmarks/svg_chart.h"
#include "planner/hardware_profile.h"

namespace tpserve {

// One combination's run.
struct CommSweepRun {
  std::string label;      // "auto", "Ring/LL", "LL" (protocol only), "auto+sym"
  std::string algorithm;  // NCCL_ALGO ("" : NCCL's choice)
  std::string protocol;   // NCCL_PROTO ("" : NCCL's choice)
  bool registered = false;
  std::optional<CommBenchReport> result;  // absent when the run failed
  std::string error;                      // why it failed (NCCL's last words)
  std::vector<NcclTuningChoice> tuning;   // NCCL's tuning lines (nccl backend)
};

struct CommSweepReport {
  Collective collective = Collective::kAllReduce;
  std::string backend;
  int ranks = 0;
  int iters = 0;
  int graph = 0;   // --graph N: the table's times are per call inside a graph of N
  int member = 0;  // across processes: this process's index (only the leader's runs have results)
  std::vector<CommSweepRun> runs;
};

// Whether these options ask for a sweep (--protocols, --algorithms or --register).
bool IsCommSweep(const CommBenchOptions& o);

// Runs every combination with `tpserve` (this executable, or another tpserve's path).
Result<CommSweepReport> RunCommSweep(const CommBenchOptions& o, const std::string& tpserve);

// The JSON `--json` prints ({"sweep": {...}}), and back (a sweep's, or one run's as "auto").
nlohmann::json CommSweepJson(const CommSweepReport& r);
Result<CommSweepReport> ParseCommSweepJson(const nlohmann::json& value, const std::string& source);

// The table; `hardware` adds the link-peak and planner columns.
std::string FormatCommSweep(const CommSweepReport& r, const planner::HardwareProfile* hardware);
LineChart CommSweepChart(const CommSweepReport& r, const planner::HardwareProfile* hardware);

// Per size of a single run: busbw as % of the link's peak and the planner's prediction (appended
// to bench-comm's table when --hardware is given).
std::string FormatHardwareComparison(const CommBenchReport& r,
                                     const planner::HardwareProfile& hardware);

}  // namespace tpserve
