// One server simulated event by event: requests arrive at their times, the server's own
// ServingCore (queue bound, batching wait, continuous batching, chunked prefill, preemption)
// decides every step, and a step model says how long each step takes. What comes out is what
// loadgen records against a real server (one RequestRecord per request), so the same report
// describes both.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "clients/load_stats.h"
#include "common/status.h"
#include "engine/step/serving_core.h"
#include "planner/decode_model.h"

namespace tpserve {

struct SimulatedRequest {
  double arrival_s = 0;  // from the start of the run, non-decreasing across requests
  int prompt_tokens = 1;
  int output_tokens = 1;  // exact (loadgen sends ignore_eos)
  // The prompt's token ids, as loadgen sends them (shared prefixes included), so that the prefix
  // cache finds what it would find in a real server; null: ids of this request's own
  // (SimulatedPrompt), sharing nothing. Shared, not copied, by every load level and replica split.
  std::shared_ptr<const std::vector<int32_t>> prompt;
};

// Token ids for request `index`'s prompt of `tokens` tokens that no other index's share.
std::vector<int32_t> SimulatedPrompt(int tokens, size_t index);

// One step as the simulation ran it.
struct SimulatedStep {
  double start_s = 0;
  double seconds = 0;
  int sequences = 0;      // in the step
  int tokens = 0;         // fed this step, prompt chunks included
  int prompt_tokens = 0;  // of which prompt (prefill or recomputation after a preemption)
  int preempted = 0;      // sequences preempted while planning it
};

struct SimulationResult {
  std::vector<RequestRecord> records;  // one per request, in arrival order
  double duration_s = 0;               // from 0 to the last request's end
  std::vector<SimulatedStep> steps;
};

// How long one step takes, from what it runs.
using StepSeconds = std::function<double(const ScheduleDecision& decision)>;

// What the step model needs of a plan: the tokens fed, the rows that sample, the positions
// attention computes over (each fed token attends to every position up to its own), and the KV
// positions it reads, once per tile of `attention_query_tile` queries of a sequence.
planner::StepShape ShapeOfStep(const StepPlan& plan, int tp, int weight_bytes, int attention_query_tile = 1);
// The step that prefills one `tokens`-token prompt from position 0 and samples its first token.
planner::StepShape PromptStepShape(int tokens, int tp, int weight_bytes, int attention_query_tile);

// Runs `requests` through a server with `options` and a KV cache of `kv_blocks` blocks of
// options.scheduler.block_size tokens. Refused requests (too long for the cache, queue full) are
// records with ok = false and error_code RESOURCE_EXHAUSTED, as loadgen records them.
// `concurrency` > 0 is loadgen's closed loop: the requests' arrival_s are ignored, the first
// `concurrency` are sent at 0 and each later one when an earlier one ends (completes or is
// refused). InvalidArgument for open-loop requests out of order or lengths < 1.
Result<SimulationResult> SimulateServing(const std::vector<SimulatedRequest>& requests,
                                         const ServingOptions& options, int kv_blocks,
                                         const StepSeconds& step_seconds, int concurrency = 0);

}  // namespace tpserve
