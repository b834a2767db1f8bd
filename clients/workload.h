// What a load test sends, as loadgen's workload flags describe it: how many requests, when
// (closed loop at a concurrency, or open loop at a rate with Poisson or bursty arrivals), and
// what (random prompts of N or LOW-HIGH tokens, or a dataset's prompts; output lengths of N or
// LOW-HIGH tokens, exact through ignore_eos; optionally after a prefix shared by a group of
// requests, as a system prompt is). `tpserve loadgen` sends it to a server and
// `tpserve plan simulate` to the model of one, request for request the same: request i's
// lengths come from (seed, i) alone, and arrival times from (rate, seed, burstiness).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "clients/load_stats.h"
#include "clients/load_target.h"
#include "common/status.h"

namespace tpserve {

// The workload flags loadgen and plan simulate share (cli/workload_flags.cc registers them).
struct WorkloadOptions {
  int concurrency = 1;        // closed loop: requests in flight
  std::vector<double> rates;  // open loop, requests/s (loadgen takes one; plan simulate a list)
  double burstiness = 1;      // gamma shape of the gaps: 1 Poisson, < 1 burstier
  int requests = 100;
  std::string prompt_tokens = "128";  // N or LOW-HIGH
  std::string output_tokens = "128";
  std::string dataset;  // JSONL of {"prompt": "..."}; empty: random prompts
  // Random prompts start with a prefix of this many tokens shared by every request of a group
  // (request i is in group i mod prefix_groups), before their own --prompt-tokens tokens.
  int shared_prefix_tokens = 0;
  int prefix_groups = 1;
  uint64_t seed = 0;
  LoadSampling sampling;  // every request's
  Slo slo;
};

struct LengthRange {
  int low = 0, high = 0;
  int Draw(std::mt19937_64& random) const {
    return low == high ? low : std::uniform_int_distribution<int>(low, high)(random);
  }
};

// "128" or "64-256"; InvalidArgument naming `flag` otherwise.
Result<LengthRange> ParseLengthRange(const std::string& text, const char* flag);

// The prompts of a JSONL dataset, one {"prompt": "..."} object per line (blank lines skipped).
// InvalidArgument naming the file and line otherwise.
Result<std::vector<std::string>> ReadDatasetPrompts(const std::string& path);

struct Workload {
  LengthRange prompt_len, output_len;
  std::vector<std::string> dataset;  // prompts; empty: random token ids
  int vocab = 0;                     // random ids are drawn below 9/10 of it
  uint64_t seed = 0;
  int shared_prefix_tokens = 0, prefix_groups = 1;
  LoadSampling sampling;

  // From the options' lengths and dataset (read here); `vocab` as above.
  static Result<Workload> FromOptions(const WorkloadOptions& options, int vocab);

  // Request `index` (negative indices: warm-up requests).
  LoadRequest Make(int index) const;
};

}  // namespace tpserve
