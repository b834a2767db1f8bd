// The engine's step limits (EngineOptions::max_step_tokens, max_step_sequences, max_context): checked
// in the engine, so every backend refuses a plan beyond them before a rank sees it, the plan fails
// alone and the engine keeps working.
#include <gtest/gtest.h>

#include "tests/engine/engine_test_util.h"

namespace tpserve {
namespace {

std::unique_ptr<Engine> MakeLimitedEngine() {
  EngineOptions options{.tp = 2, .threads = 2, .block_size = 4, .kv_cache_mb = 16, .max_step_tokens = 8,
                        .max_step_sequences = 2, .max_context = 32};
  auto engine = Engine::Create(testing::TinyModel(), options);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  return std::move(engine).value();
}

SequencePlan Prompt(Engine& engine, int64_t id, int tokens, int start = 0) {
  SequencePlan seq{.sequence_id = id, .start_position = start,
                   .block_table = testing::AllocateBlocks(engine, start + tokens)};
  for (int t = 0; t < tokens; ++t) seq.tokens.push_back(1000 + static_cast<int32_t>(id) * 10 + t);
  return seq;
}

TEST(EngineLimits, PlansOverTheStepLimitsFailAloneNamingStepCountAndLimit) {
  auto engine = MakeLimitedEngine();
  EXPECT_EQ(engine->max_step_tokens(), 8);
  EXPECT_EQ(engine->max_step_sequences(), 2);
  EXPECT_EQ(engine->max_context(), 32);

  // 5 + 4 tokens: one over the limit.
  auto tokens = engine->Step(StepPlan{.step_id = 3, .sequences = {Prompt(*engine, 1, 5), Prompt(*engine, 2, 4)}});
  EXPECT_EQ(tokens.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(tokens.status().message(),
              ::testing::HasSubstr("step 3: 9 tokens, over the engine's step limit of 8 (max_step_tokens"));

  auto sequences = engine->Step(StepPlan{
      .step_id = 4, .sequences = {Prompt(*engine, 1, 1), Prompt(*engine, 2, 1), Prompt(*engine, 3, 1)}});
  EXPECT_EQ(sequences.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(sequences.status().message(),
              ::testing::HasSubstr("step 4: 3 sequences, over the engine's step limit of 2 (max_step_sequences)"));

  auto context = engine->Step(StepPlan{.step_id = 5, .sequences = {Prompt(*engine, 1, 2, 31)}});
  EXPECT_EQ(context.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(context.status().message(),
              ::testing::HasSubstr("step 5: sequence 1 needs 33 positions, over the engine's context limit of 32"));

  // The engine is not failed: a plan at every limit runs.
  EXPECT_TRUE(engine->failure().ok());
  auto at_limits = engine->Step(StepPlan{.step_id = 6, .sequences = {Prompt(*engine, 1, 4, 28), Prompt(*engine, 2, 4)}});
  ASSERT_TRUE(at_limits.ok()) << at_limits.status().ToString();
  EXPECT_EQ(at_limits->tokens.size(), 2u);
}

TEST(EngineLimits, CreateRefusesLimitsBelowOneNamingTheFlag) {
  EngineOptions options{.tp = 1, .threads = 1, .block_size = 4, .kv_cache_mb = 16};
  options.max_step_tokens = 0;
  auto tokens = Engine::Create(testing::TinyModel(), options);
  EXPECT_EQ(tokens.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(tokens.status().message(), ::testing::HasSubstr("--max-batched-tokens"));
  EXPECT_THAT(tokens.status().message(), ::testing::HasSubstr("must be at least 1, not 0"));
  options.max_step_tokens = 8192;
  options.max_step_sequences = -1;
  auto sequences = Engine::Create(testing::TinyModel(), options);
  EXPECT_THAT(sequences.status().message(), ::testing::HasSubstr("--max-batch-size"));
  options.max_step_sequences = 256;
  options.max_context = -5;
  auto context = Engine::Create(testing::TinyModel(), options);
  EXPECT_THAT(context.status().message(), ::testing::HasSubstr("--max-model-len"));
  // 0: the model's context.
  options.max_context = 0;
  auto defaults = Engine::Create(testing::TinyModel(), options);
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_EQ((*defaults)->max_context(), testing::TinyModel().config.max_position_embeddings);
}

}  // namespace
}  // namespace tpserve
