// `tpserve plan calibrate`: a hardware profile from measurements the user already has —
// bench-comm --json and plain nccl-tests output (α/β per size range, fitted with comm/'s one
// fitter), and bench-decode --json (achieved memory bandwidth and compute rate, per-step host
// time), or any engine's decode-step times (its memory efficiency and per-layer time). The result
// is a profile file `plan --hardware FILE` takes.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "comm/cost_model.h"
#include "planner/hardware_profile.h"

namespace tpserve::planner {

// One collective's sweep: (bytes, seconds per call) at one rank count.
struct CommSamples {
  Collective collective = Collective::kAllReduce;
  int ranks = 0;
  std::vector<std::pair<double, double>> points;
  std::string source;
  // The NCCL_ALGO / NCCL_PROTO the sweep forced (a bench-comm --protocols run); empty: NCCL's choice.
  std::string algorithm, protocol;
};

// One bench-comm --json run.
Result<CommSamples> ParseBenchCommJson(const nlohmann::json& value, const std::string& source);
// A bench-comm --json file: one run, or a --protocols / --algorithms sweep, whose every run that
// measured becomes samples of its own path (the "auto" run: NCCL's choice; --register's run is
// left out: the planner does not model symmetric kernels).
Result<std::vector<CommSamples>> ParseBenchCommFile(const nlohmann::json& value, const std::string& source);
// nccl-tests' text (all_reduce_perf, all_gather_perf): the rank count from its "#  Rank" lines, the
// collective from the test's name (else the redop column), the out-of-place time of every size.
// A row with #wrong > 0 is an error naming its size.
Result<CommSamples> ParseNcclTestsOutput(std::string_view text, const std::string& source);

// α/β for sizes below 64 KiB, 64 KiB – 1 MiB and above 1 MiB (each with at least two sizes).
Result<std::vector<CollectiveFit>> FitCollective(const CommSamples& samples);

struct CalibrateInputs {
  std::vector<std::string> bench_comm;    // files
  std::vector<std::string> nccl_tests;    // files
  std::vector<std::string> bench_decode;  // files
  std::vector<std::string> engine_steps;  // files: any engine's step times (planner/engine_steps.h)
  std::string base;                       // preset or profile file; empty: a CPU profile from bench-decode
  std::string date;                       // written into the profile's description
};

struct Calibration {
  HardwareProfile profile;
  std::vector<std::string> notes;  // what was fitted from what, one line each
};

Result<Calibration> Calibrate(const CalibrateInputs& inputs);

}  // namespace tpserve::planner
