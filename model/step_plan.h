// What the engine hands every rank for one step, and what it gets back. Plain data, so that a
// plan can later travel to ranks in other processes or on other nodes.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/step_trace.h"

namespace tpserve {

struct SequencePlan {
  int64_t sequence_id = 0;
  std::vector<int32_t> tokens;       // this step's new tokens: a prompt chunk or the last sample
  int32_t start_position = 0;        // position of tokens[0] (= tokens already in the KV cache)
  std::vector<int32_t> block_table;  // KV block ids covering positions [0, start + tokens)
  bool want_logits = true;           // return logits of the last token (to sample from)
};

struct StepPlan {
  int64_t step_id = 0;
  std::vector<SequencePlan> sequences;

  int token_count() const {
    int n = 0;
    for (const auto& s : sequences) n += static_cast<int>(s.tokens.size());
    return n;
  }
};

struct StepResult {
  // Logits of the last token of each sequence with want_logits, in plan order:
  // [logit_rows, vocab_size] (vocabulary padding removed). Borrowed from the engine: valid until
  // its next Step (the buffers are reused, so a step never page-faults in fresh megabytes).
  std::span<const float> logits;
  int logit_rows = 0;
  StepTrace trace;
};

}  // namespace tpserve
