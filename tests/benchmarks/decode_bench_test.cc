// bench-decode's context fill: prompts split into prefill steps within the engine's step limit, as
// the server's scheduler splits them, and the same KV cache as one big prefill step.
#include "benchmarks/decode_bench.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/engine/engine_test_util.h"

namespace tpserve {
namespace {

std::vector<SequencePlan> Prompts(Engine* engine, const std::vector<int>& lengths, int extra_positions) {
  std::vector<SequencePlan> seqs;
  for (size_t s = 0; s < lengths.size(); ++s) {
    SequencePlan seq{.sequence_id = static_cast<int64_t>(s)};
    for (int t = 0; t < lengths[s]; ++t) seq.tokens.push_back(static_cast<int32_t>((s * 7919 + t * 104729) % 100000));
    if (engine) seq.block_table = testing::AllocateBlocks(*engine, lengths[s] + extra_positions);
    seqs.push_back(std::move(seq));
  }
  return seqs;
}

TEST(ChunkedPrefill, StepsHoldAtMostTheLimitAndPartsOfSeveralPrompts) {
  const std::vector<SequencePlan> seqs = Prompts(nullptr, {40, 5, 40}, 0);
  const std::vector<StepPlan> steps = ChunkedPrefill(seqs, 16, 7);
  ASSERT_EQ(steps.size(), 6u);  // 85 tokens, 16 a step
  std::vector<int> fed(seqs.size(), 0);
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i].step_id, 7 + static_cast<int64_t>(i));
    EXPECT_LE(steps[i].token_count(), 16);
    if (i + 1 < steps.size()) {
      EXPECT_EQ(steps[i].token_count(), 16);
    }
    for (const SequencePlan& part : steps[i].sequences) {
      const SequencePlan& whole = seqs[part.sequence_id];
      EXPECT_EQ(part.start_position, fed[part.sequence_id]);
      EXPECT_TRUE(std::equal(part.tokens.begin(), part.tokens.end(), whole.tokens.begin() + part.start_position));
      fed[part.sequence_id] += static_cast<int>(part.tokens.size());
      EXPECT_EQ(part.want_logits, fed[part.sequence_id] == static_cast<int>(whole.tokens.size()));
    }
  }
  EXPECT_EQ(fed, (std::vector<int>{40, 5, 40}));
  // Step 2 holds the end of prompt 0, all of prompt 1 and the start of prompt 2.
  ASSERT_EQ(steps[2].sequences.size(), 3u);
  EXPECT_EQ(steps[2].sequences[0].tokens.size(), 8u);
  EXPECT_EQ(steps[2].sequences[1].tokens.size(), 5u);
  EXPECT_EQ(steps[2].sequences[2].tokens.size(), 3u);
  // Under the limit: one step, the plans unchanged.
  const std::vector<StepPlan> one = ChunkedPrefill(seqs, 8192, 0);
  ASSERT_EQ(one.size(), 1u);
  ASSERT_EQ(one[0].sequences.size(), 3u);
  EXPECT_EQ(one[0].sequences[2].tokens, seqs[2].tokens);
  EXPECT_TRUE(one[0].sequences[2].want_logits);
}

// Fills 4 contexts of 40 tokens with `limit` tokens a step, then runs one decode step; its logits.
std::vector<float> DecodeAfterFill(int limit) {
  EngineOptions options{.tp = 2, .threads = 2, .block_size = 4, .kv_cache_mb = 16, .max_step_tokens = limit};
  auto engine = Engine::Create(testing::TinyModel(), options);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  std::vector<SequencePlan> seqs = Prompts(engine->get(), {40, 40, 40, 40}, 1);
  const std::vector<StepPlan> fill = ChunkedPrefill(seqs, (*engine)->max_step_tokens(), 0);
  EXPECT_EQ(fill.size(), limit >= 160 ? 1u : (160u + limit - 1) / limit);
  for (const StepPlan& plan : fill) {
    auto result = (*engine)->Step(plan);
    EXPECT_TRUE(result.ok()) << result.status().ToString();
  }
  for (SequencePlan& seq : seqs) {
    seq.start_position = static_cast<int32_t>(seq.tokens.size());
    seq.tokens = {static_cast<int32_t>(300 + seq.sequence_id)};
  }
  auto decode = (*engine)->Step(StepPlan{.step_id = static_cast<int64_t>(fill.size()), .sequences = seqs});
  EXPECT_TRUE(decode.ok()) << decode.status().ToString();
  if (!decode.ok()) return {};
  return std::vector<float>(decode->logits.begin(), decode->logits.end());
}

// The CPU backend is batch-invariant (docs/ARCHITECTURE.md): each token's KV and each query's
// attention do not depend on what else shares its step, so chunking must not change the result.
TEST(ChunkedPrefill, FillsTheSameKvCacheAsOneStep) {
  const std::vector<float> chunked = DecodeAfterFill(16);
  const std::vector<float> whole = DecodeAfterFill(8192);
  ASSERT_EQ(chunked.size(), whole.size());
  ASSERT_EQ(chunked.size(), 4u * testing::TinyModel().config.vocab_size);
  double worst = 0;
  for (size_t i = 0; i < whole.size(); ++i) worst = std::max(worst, std::abs(double{chunked[i]} - whole[i]));
  EXPECT_LT(worst, 1e-4);
}

// bench-decode's paired read runs each timed decode step once untimed first (the read left the
// engine's threads asleep): the repeat writes the same KV slots with the same values, so the timed
// step and every later one compute exactly what they would have without it.
TEST(DecodeBench, RepeatingADecodeStepChangesNothing) {
  auto run = [](bool repeat) {
    EngineOptions options{.tp = 1, .threads = 2, .block_size = 4, .kv_cache_mb = 16};
    auto engine = Engine::Create(testing::TinyModel(), options);
    EXPECT_TRUE(engine.ok()) << engine.status().ToString();
    std::vector<SequencePlan> seqs = Prompts(engine->get(), {9, 6}, 3);
    std::vector<float> logits;  // [steps, rows, vocab]: the decode steps', in order
    for (int step = 0; step < 4; ++step) {
      const StepPlan plan{.step_id = step, .sequences = seqs};
      if (repeat && step > 0) {
        auto first = (*engine)->Step(plan);
        EXPECT_TRUE(first.ok()) << first.status().ToString();
      }
      auto result = (*engine)->Step(plan);
      EXPECT_TRUE(result.ok()) << result.status().ToString();
      if (!result.ok()) return logits;
      if (step > 0) logits.insert(logits.end(), result->logits.begin(), result->logits.end());
      for (size_t s = 0; s < seqs.size(); ++s) {
        seqs[s].start_position += static_cast<int32_t>(seqs[s].tokens.size());
        seqs[s].tokens = {result->tokens[s].id};  // greedy: the next step depends on these logits
      }
    }
    return logits;
  };
  const std::vector<float> once = run(false), twice = run(true);
  ASSERT_EQ(once.size(), 3u * 2 * testing::TinyModel().config.vocab_size);
  ASSERT_EQ(twice.size(), once.size());
  size_t differing = 0;
  for (size_t i = 0; i < once.size(); ++i) differing += once[i] != twice[i] ? 1 : 0;
  EXPECT_EQ(differing, 0u) << "bitwise: the CPU backend is deterministic for one kernel and thread count";
}

}  // namespace
}  // namespace tpserve
