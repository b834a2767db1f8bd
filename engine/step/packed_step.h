// One step's plan as the flat arrays a GPU decoder copies to the device in one transfer (vLLM
// calls this the input batch): every token's id, position and KV slot, and every sequence's
// query range, context length and block table, padded to one width. Host code only: it is built
// and tested on the CPU, and the CUDA backend consumes it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/step/step_plan.h"

namespace tpserve {

struct PackedStep {
  int num_tokens = 0;
  int num_sequences = 0;
  int block_table_width = 0;  // the most KV blocks a sequence of the step reaches

  std::vector<int32_t> token_ids;        // [num_tokens]
  std::vector<int32_t> positions;        // [num_tokens]
  std::vector<int32_t> slot_mapping;     // [num_tokens] KV slot: block * block_size + position % block_size
  std::vector<int32_t> token_sequence;   // [num_tokens] index of the token's sequence in the plan
  std::vector<int32_t> query_start;      // [num_sequences + 1] first token of each sequence; last = num_tokens
  std::vector<int32_t> context_lengths;  // [num_sequences] KV positions each sequence attends to
  std::vector<int32_t> block_tables;     // [num_sequences, block_table_width] row-major: the blocks each
                                         // sequence's positions reach, padded with -1
  std::vector<int32_t> logit_tokens;     // [logit rows] the token whose logits each row returns

  // Every array above, concatenated in declaration order: one host-to-device copy.
  std::vector<int32_t> Concatenated() const;
};

// Checks the plan (tokens present, block tables covering every position, block ids and slots
// within int32) and packs it. Errors name the sequence.
Result<PackedStep> PackStep(const StepPlan& plan, int block_size);

// Which logit rows a GPU samples itself (greedy, no logprobs: the rest go to the host sampler), and
// the ids each row may not pick, flattened for the same copy: SampleToken's bans (stop ids, and eos
// unless ignore_eos, before min_tokens), kept inside the vocabulary, deduplicated, and dropped when
// they cover all of it.
struct DeviceSamplingPlan {
  std::vector<int32_t> on_device;       // [logit rows] 1: sampled on the device, 0: on the host
  std::vector<int32_t> banned_offsets;  // [logit rows + 1] row r's bans: banned_ids[offsets[r], offsets[r + 1])
  std::vector<int32_t> banned_ids;

  bool all_on_device() const;
};

DeviceSamplingPlan PlanDeviceSampling(const StepPlan& plan, std::span<const int> eos_ids, int vocab_size);

// Moves every row with more than `max_bans_per_row` bans to the host sampler (which applies the
// bans itself) and drops its bans here, so that the device's ban arrays fit a size fixed in
// advance: rows × max_bans_per_row. Returns how many rows moved.
int MoveManyBansToHost(int max_bans_per_row, DeviceSamplingPlan* plan);

// The logit rows rank 0 copies back after a step: every row when the caller wants the logits,
// else only the rows the host samples (the others' tokens come from the device).
std::vector<int32_t> HostLogitRows(const DeviceSamplingPlan& plan, bool return_logits);

}  // namespace tpserve
