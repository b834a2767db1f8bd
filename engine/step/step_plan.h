// What the engine hands every rank for one step, and what it gets back. Plain data, so that a
// plan can later travel to ranks in other processes or on other nodes.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/step/sampler.h"
#include "engine/step/step_trace.h"

namespace tpserve {

struct SequencePlan {
  int64_t sequence_id = 0;
  std::vector<int32_t> tokens;       // this step's new tokens: a prompt chunk or the last sample
  int32_t start_position = 0;        // position of tokens[0] (= tokens already in the KV cache)
  std::vector<int32_t> block_table;  // KV block ids covering positions [0, start + tokens)
  bool want_logits = true;           // sample a token from the last token's logits
  // With want_logits: how to sample, and which of the sequence's draws this is (the tokens it has
  // sampled so far), so that sampling is stateless: the same on any rank, backend or batch.
  SamplingParams sampling;
  int32_t sampled_tokens = 0;
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
  // The token sampled for each sequence with want_logits, in plan order (SampleToken; stop/eos
  // ids are banned while sampled_tokens < sampling.min_tokens).
  std::vector<SampledToken> tokens;
  // Logits of the last token of each sequence with want_logits, in plan order:
  // [logit_rows, vocab_size] (vocabulary padding removed). Borrowed from the engine: valid until
  // its next Step (the buffers are reused, so a step never page-faults in fresh megabytes).
  std::span<const float> logits;
  int logit_rows = 0;
  StepTrace trace;
};

}  // namespace tpserve
