// Turns step traces into what people read: a profile summary (ops ranked by time, AllReduce
// latency by message size, comm share), a Chrome/Perfetto trace file (one track per rank), and
// the timing numbers of `generate --json`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/step/step_trace.h"

namespace tpserve {

struct TraceSummary {
  int steps = 0;
  int prefill_steps = 0;
  int decode_steps = 0;       // steps with decode tokens only
  int64_t decode_tokens = 0;
  int64_t prefill_tokens = 0;  // prompt tokens computed
  int64_t cached_tokens = 0;   // prompt tokens taken from the prefix cache instead
  double prefill_s = 0;       // wall time of steps that carried prompt tokens
  double decode_s = 0;        // wall time of decode-only steps
  double decode_tokens_per_s = 0;
  double comm_share = 0;      // decode steps: collective time / forward time, slowest rank
  double host_share = 0;      // decode steps: (step wall - slowest rank forward) / step wall
  double mean_decode_step_ms = 0;
};

TraceSummary Summarize(const std::vector<StepTrace>& steps);

// The --profile table.
std::string FormatProfile(const std::vector<StepTrace>& steps);

// Chrome trace event format (opens in ui.perfetto.dev): one process, one thread per rank.
Status WriteChromeTrace(const std::vector<StepTrace>& steps, const std::string& path);

}  // namespace tpserve
