// Picks the next token from a row of logits: greedy, or temperature / top-k / top-p sampling
// with a per-sequence seeded generator (reproducible). Log-probabilities follow the OpenAI /
// vLLM convention: log-softmax of the raw logits, before temperature, top-k and top-p.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tpserve {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy
  int top_k = 0;             // 0: no limit
  float top_p = 1.0f;        // (0, 1]
  uint64_t seed = 0;
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

// Ids that may not be sampled yet: the stop ids and, unless ignore_eos, the eos ids, while fewer
// than min_tokens tokens have been generated (empty otherwise).
std::vector<int32_t> BannedTokens(const SamplingParams& params, std::span<const int> eos_ids,
                                  int generated);

// Whether sampling `id` ends the sequence: a stop id, or an eos id unless ignore_eos.
bool IsStopToken(const SamplingParams& params, std::span<const int> eos_ids, int32_t id);

class Sampler {
 public:
  explicit Sampler(uint64_t seed) : state_(seed) {}

  // `banned` ids (stop/eos tokens before min_tokens) are never chosen.
  SampledToken Sample(std::span<const float> logits, const SamplingParams& params,
                      std::span<const int32_t> banned = {});

 private:
  double Uniform();  // [0, 1)
  uint64_t state_;   // SplitMix64
};

}  // namespace tpserve
