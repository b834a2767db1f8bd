#include "engine/generator.h"

#include <algorithm>

namespace tpserve {
namespace {

struct Sequence {
  size_t request = 0;
  std::vector<int32_t> blocks;
  size_t prefilled = 0;  // prompt tokens already in the KV cache
  bool started = false;  // its prompt has begun (any cached prefix taken)
  bool done = false;
  KvBlockPool::PrefixChain cached;  // its leading prompt blocks in the prefix cache
};

// Whether two prompts' first full blocks agree (so the later one waits for the earlier's).
bool ShareFirstBlock(const std::vector<int32_t>& a, const std::vector<int32_t>& b, size_t block_size) {
  return a.size() > block_size && b.size() > block_size && std::equal(a.begin(), a.begin() + block_size, b.begin());
}

}  // namespace

Status Generator::Validate(const GenerationRequest& r, size_t index) const {
  const ModelConfig& c = engine_->config();
  const std::string who = "request " + std::to_string(index) + ": ";
  if (r.prompt.empty()) return InvalidArgument(who + "prompt is empty");
  if (r.max_tokens < 1) return InvalidArgument(who + "max_tokens must be at least 1");
  const size_t needed = r.prompt.size() + r.max_tokens;
  if (needed > static_cast<size_t>(c.max_position_embeddings)) {
    return InvalidArgument(who + "prompt (" + std::to_string(r.prompt.size()) + " tokens) + max_tokens (" +
                           std::to_string(r.max_tokens) + ") exceeds the context window of " +
                           std::to_string(c.max_position_embeddings));
  }
  for (int32_t id : r.prompt) {
    if (id < 0 || id >= c.vocab_size) {
      return InvalidArgument(who + "token id " + std::to_string(id) + " is outside the vocabulary");
    }
  }
  return ValidateSamplingParams(r.sampling, who);
}

Result<std::vector<GenerationOutput>> Generator::Run(const std::vector<GenerationRequest>& requests,
                                                     const GenerationOptions& options,
                                                     const TokenCallback& on_token,
                                                     std::vector<StepTrace>* traces) {
  if (options.max_batched_tokens < 1) return InvalidArgument("max_batched_tokens must be at least 1");
  KvBlockPool& pool = engine_->block_pool();
  const int block_size = engine_->block_size();
  std::vector<Sequence> sequences(requests.size());
  std::vector<GenerationOutput> outputs(requests.size());
  auto release = [&](Sequence& s) {
    // Tail first: the pool evicts idle cached blocks freed longest ago, so shared heads stay.
    for (auto b = s.blocks.rbegin(); b != s.blocks.rend(); ++b) pool.Free(*b);
    s.blocks.clear();
  };
  const size_t bs = static_cast<size_t>(block_size);
  // Prefix caching: the cached blocks that match the start of a prompt replace the ones allocated
  // for it (never the last prompt token's: its logits sample). Returns the tokens taken.
  auto take_cached_prefix = [&](Sequence& s) -> size_t {
    const std::vector<int32_t>& prompt = requests[s.request].prompt;
    std::vector<int32_t> found;
    pool.TakeCachedBlocks(prompt, block_size, (prompt.size() - 1) / bs, &s.cached, &found);
    for (size_t k = 0; k < found.size(); ++k) {
      pool.Free(s.blocks[k]);
      s.blocks[k] = found[k];
    }
    s.prefilled = s.cached.blocks * bs;
    return s.prefilled;
  };
  auto release_all = [&] {
    for (auto& s : sequences) release(s);
  };

  // Admission: every request gets the blocks its whole generation needs, up front.
  for (size_t i = 0; i < requests.size(); ++i) {
    RETURN_IF_ERROR(Validate(requests[i], i));
    const size_t positions = requests[i].prompt.size() + requests[i].max_tokens;
    const size_t blocks = (positions + block_size - 1) / block_size;
    Sequence& s = sequences[i];
    s.request = i;
    for (size_t b = 0; b < blocks; ++b) {
      auto block = pool.Allocate();
      if (!block) {
        release_all();
        return Status(StatusCode::kResourceExhausted,
                      "KV cache too small: request " + std::to_string(i) + " needs " +
                          std::to_string(blocks) + " blocks, " + std::to_string(pool.total_blocks()) +
                          " in all (raise --kv-cache-mb)");
      }
      s.blocks.push_back(*block);
    }
  }

  const std::vector<int>& eos = engine_->config().eos_token_ids;
  for (int64_t step_id = 0;; ++step_id) {
    StepPlan plan;
    plan.step_id = step_id;
    std::vector<size_t> planned;  // sequence index of each plan entry
    int budget = options.max_batched_tokens;
    int cached_tokens = 0;  // prompt tokens taken from the prefix cache this step
    int prompt_tokens_fed = 0;
    // Decodes first (one token each), then prompt chunks with what is left of the budget.
    for (int pass = 0; pass < 2; ++pass) {
      for (size_t i = 0; i < sequences.size(); ++i) {
        Sequence& s = sequences[i];
        const GenerationRequest& r = requests[s.request];
        const bool decoding = s.prefilled == r.prompt.size();
        if (s.done || decoding != (pass == 0) || budget == 0) continue;
        if (!s.started && options.prefix_caching) {
          // Wait while an earlier request with the same first block has not prefilled its prompt.
          const bool wait = std::any_of(sequences.begin(), sequences.begin() + static_cast<std::ptrdiff_t>(i),
                                        [&](const Sequence& earlier) {
                                          const auto& prompt = requests[earlier.request].prompt;
                                          return !earlier.done && earlier.prefilled < prompt.size() &&
                                                 ShareFirstBlock(prompt, r.prompt, bs);
                                        });
          if (wait) continue;
          cached_tokens += static_cast<int>(take_cached_prefix(s));
        }
        s.started = true;
        SequencePlan p;
        p.sequence_id = static_cast<int64_t>(i);
        p.block_table = s.blocks;
        p.sampling = r.sampling;
        p.sampled_tokens = static_cast<int32_t>(outputs[i].tokens.size());
        if (decoding) {
          p.tokens = {outputs[i].tokens.back().id};
          p.start_position = static_cast<int32_t>(r.prompt.size() + outputs[i].tokens.size() - 1);
        } else {
          const size_t chunk = std::min<size_t>(budget, r.prompt.size() - s.prefilled);
          p.tokens.assign(r.prompt.begin() + s.prefilled, r.prompt.begin() + s.prefilled + chunk);
          p.start_position = static_cast<int32_t>(s.prefilled);
          p.want_logits = s.prefilled + chunk == r.prompt.size();
          prompt_tokens_fed += static_cast<int>(chunk);
        }
        budget -= static_cast<int>(p.tokens.size());
        plan.sequences.push_back(std::move(p));
        planned.push_back(i);
      }
    }
    if (plan.sequences.empty()) break;

    auto result = engine_->Step(plan);
    if (!result.ok()) {
      release_all();
      return result.status();
    }
    int row = 0;  // of result->tokens
    for (size_t k = 0; k < planned.size(); ++k) {
      Sequence& s = sequences[planned[k]];
      const GenerationRequest& r = requests[s.request];
      if (s.prefilled < r.prompt.size()) {
        s.prefilled += plan.sequences[k].tokens.size();
        if (options.prefix_caching) pool.CacheFilledBlocks(r.prompt, s.blocks, s.prefilled, block_size, &s.cached);
      }
      if (!plan.sequences[k].want_logits) continue;
      GenerationOutput& out = outputs[planned[k]];
      out.tokens.push_back(result->tokens[row++]);
      if (on_token) on_token(planned[k], out.tokens.back());
      if (IsStopToken(r.sampling, eos, out.tokens.back().id)) {
        out.finish_reason = "stop";
      } else if (static_cast<int>(out.tokens.size()) == r.max_tokens) {
        out.finish_reason = "length";
      }
      if (!out.finish_reason.empty()) {
        s.done = true;
        release(s);
      }
    }
    // The engine counts one-token chunks as decode; a prompt's last token after a cached prefix
    // is prompt work, and the Generator knows which entries are prompt chunks.
    result->trace.prefill_tokens = prompt_tokens_fed;
    result->trace.decode_tokens = plan.token_count() - prompt_tokens_fed;
    result->trace.cached_tokens = cached_tokens;
    if (traces) traces->push_back(std::move(result->trace));
  }
  return outputs;
}

}  // namespace tpserve
