// Picks the next token from a row of logits: greedy, or temperature / top-k / top-p sampling
// with a per-sequence seeded generator (reproducible). Log-probabilities follow the OpenAI /
// vLLM convention: log-softmax of the raw logits, before temperature, top-k and top-p.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/step/softmax_weights.h"

namespace tpserve {

// Temperatures below this are greedy (vLLM's threshold): the softmax at such a temperature puts
// all its mass on the largest logit anyway, and greedy breaks ties the same way every time.
inline constexpr float kGreedyTemperature = 1e-5f;

struct SamplingParams {
  float temperature = 0.0f;  // < kGreedyTemperature: greedy; finite
  int top_k = 0;             // 0: no limit
  float top_p = 1.0f;        // (0, 1]
  uint64_t seed = 0;         // of the sequence's draws (SampleToken)
  int min_tokens = 0;        // stop tokens are masked until this many tokens are generated
  bool ignore_eos = false;   // never stop on eos (fixed output lengths for load tests)
  int logprobs = 0;          // top-N alternatives to report per token
  std::vector<int32_t> stop_token_ids;
};

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;
};

struct SampledToken {
  int32_t id = 0;
  float logprob = 0.0f;             // of the chosen token (computed only when logprobs > 0)
  std::vector<TokenLogprob> top;    // the `logprobs` most likely tokens, most likely first
};

// Checks the ranges every front end enforces (temperature finite and >= 0, top_p in (0, 1],
// top_k >= 0); the message names the field as `prefix` + name, e.g. "sampling.temperature".
Status ValidateSamplingParams(const SamplingParams& params, const std::string& prefix);

// Ids that may not be sampled yet: the stop ids and, unless ignore_eos, the eos ids, while fewer
// than min_tokens tokens have been generated (empty otherwise).
std::vector<int32_t> BannedTokens(const SamplingParams& params, std::span<const int> eos_ids,
                                  int generated);

// Whether sampling `id` ends the sequence: a stop id, or an eos id unless ignore_eos.
bool IsStopToken(const SamplingParams& params, std::span<const int> eos_ids, int32_t id);

// Token number `draw` (0-based) of a sequence: greedy, or one draw from softmax(logits / T) under
// top-k and top-p using output `draw` of the SplitMix64 stream seeded params.seed. Stateless: the
// same logits, parameters and draw give the same token on any thread, rank or backend. `banned`
// ids (stop/eos tokens before min_tokens) are never chosen.
SampledToken SampleToken(std::span<const float> logits, const SamplingParams& params,
                         std::span<const int32_t> banned, uint64_t draw);

// Greedy's search, for its tests: the first id of the largest logit above -inf (-1 if none), by
// the instruction set named (kBest: what SampleToken uses on this CPU).
int32_t FirstLargestLogit(std::span<const float> logits, SimdPath path);

}  // namespace tpserve
