// Offline generation over the engine: admits a set of requests, prefills their prompts in chunks
// under a per-step token budget while already-prefilled sequences keep decoding, samples, and
// stops each sequence on eos / stop tokens or max_tokens. The gRPC server's scheduler (issue 4)
// replaces the admission part; the step loop is the same. Step traces count the prompt tokens
// each step took from the prefix cache (StepTrace::cached_tokens).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/engine.h"
#include "engine/step/sampler.h"

namespace tpserve {

struct GenerationRequest {
  std::vector<int32_t> prompt;
  int max_tokens = 16;
  SamplingParams sampling;
};

struct GenerationOutput {
  std::vector<SampledToken> tokens;
  std::string finish_reason;  // "length" or "stop"
};

struct GenerationOptions {
  int max_batched_tokens = 2048;  // tokens per step, prefill chunks included
  // Requests whose prompts start alike (generate --batch: copies of one prompt) prefill the shared
  // full blocks once: a request waits while an earlier one with the same first block prefills, then
  // takes the cached blocks from the engine's pool (--prefix-caching on|off; outputs unchanged).
  bool prefix_caching = true;
};

// Called as each token is sampled: (request index, token).
using TokenCallback = std::function<void(size_t, const SampledToken&)>;

class Generator {
 public:
  explicit Generator(Engine* engine) : engine_(engine) {}

  // `traces`, when given, receives every step's trace.
  Result<std::vector<GenerationOutput>> Run(const std::vector<GenerationRequest>& requests,
                                            const GenerationOptions& options,
                                            const TokenCallback& on_token = {},
                                            std::vector<StepTrace>* traces = nullptr);

 private:
  Status Validate(const GenerationRequest& request, size_t index) const;
  Engine* engine_;
};

}  // namespace tpserve
