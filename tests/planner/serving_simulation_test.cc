// The serving simulation's clock and queueing on cases worked out by hand (steps of fixed cost,
// so every time below is a sum of arrival times and step counts).
#include "planner/serving_simulation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tpserve {
namespace {

using ::testing::ElementsAre;

ServingOptions Options(int max_batch_size, int max_batched_tokens, int max_wait_us,
                       int max_queue = 256) {
  ServingOptions options;
  options.scheduler = {
      .max_batch_size = max_batch_size, .max_batched_tokens = max_batched_tokens, .block_size = 4};
  options.max_wait_us = max_wait_us;
  options.max_queue = max_queue;
  return options;
}

StepSeconds EverySecond() {
  return [](const ScheduleDecision&) { return 1.0; };
}

TEST(ServingSimulation, ASharedPrefixIsPrefilledOnceWithThePrefixCache) {
  // Two requests whose prompts share 20 tokens (5 blocks of 4), the second sent after the first
  // ended: with the cache its prefill feeds 23 - 20 = 3 tokens, without it all 23.
  std::vector<int32_t> shared(20), first, second;
  for (int i = 0; i < 20; ++i) shared[i] = 100 + i;
  first = second = shared;
  first.insert(first.end(), {1, 2, 3});
  second.insert(second.end(), {7, 8, 9});
  const std::vector<SimulatedRequest> requests = {
      {.arrival_s = 0, .prompt_tokens = 23, .output_tokens = 2, .prompt = std::make_shared<const std::vector<int32_t>>(first)},
      {.arrival_s = 10, .prompt_tokens = 23, .output_tokens = 2, .prompt = std::make_shared<const std::vector<int32_t>>(second)}};
  for (bool caching : {true, false}) {
    ServingOptions options = Options(8, 512, 0);
    options.scheduler.prefix_caching = caching;
    auto result = SimulateServing(requests, options, 64, EverySecond());
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    std::vector<int> prompt_tokens;
    for (const SimulatedStep& step : result->steps) {
      if (step.prompt_tokens > 0) prompt_tokens.push_back(step.prompt_tokens);
    }
    EXPECT_THAT(prompt_tokens, ElementsAre(23, caching ? 3 : 23));
  }
  // Prompt ids that disagree with the prompt's length are refused by name.
  std::vector<SimulatedRequest> bad = requests;
  bad[1].prompt_tokens = 24;
  auto refused = SimulateServing(bad, Options(8, 512, 0), 64, EverySecond());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("request 1 has 23 prompt ids for 24 prompt tokens"), std::string::npos);
}

TEST(ServingSimulation, OneRequestPrefillsThenDecodesOneTokenPerStep) {
  auto result = SimulateServing({{.arrival_s = 2, .prompt_tokens = 5, .output_tokens = 3}},
                                Options(8, 512, 0), 64, EverySecond());
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  const RequestRecord& r = result->records.at(0);
  EXPECT_TRUE(r.ok);
  EXPECT_DOUBLE_EQ(r.ttft_s, 1);  // the prefill step, started on arrival
  EXPECT_DOUBLE_EQ(r.e2e_s, 3);   // + two decode steps
  EXPECT_THAT(r.itl_s, ElementsAre(1.0, 1.0));
  EXPECT_EQ(r.output_tokens, 3);
  EXPECT_DOUBLE_EQ(result->duration_s, 5);
  ASSERT_EQ(result->steps.size(), 3u);
  EXPECT_EQ(result->steps[0].prompt_tokens, 5);
  EXPECT_EQ(result->steps[1].prompt_tokens, 0);
  EXPECT_EQ(result->steps[1].tokens, 1);
}

TEST(ServingSimulation, AnIdleEngineWaitsForAFullBatchOrTheMaxWait) {
  const std::vector<SimulatedRequest> two = {
      {.arrival_s = 0, .prompt_tokens = 2, .output_tokens = 1},
      {.arrival_s = 0.004, .prompt_tokens = 2, .output_tokens = 1}};
  // A batch of two is full at the second arrival: one step starts then.
  auto full = SimulateServing(two, Options(2, 512, 10'000), 64, EverySecond());
  ASSERT_TRUE(full.ok());
  ASSERT_EQ(full->steps.size(), 1u);
  EXPECT_DOUBLE_EQ(full->steps[0].start_s, 0.004);
  EXPECT_DOUBLE_EQ(full->records[0].ttft_s, 1.004);
  EXPECT_DOUBLE_EQ(full->records[1].ttft_s, 1.0);
  // A batch of eight never fills: the step starts when the 10 ms wait is over.
  auto waited = SimulateServing(two, Options(8, 512, 10'000), 64, EverySecond());
  ASSERT_TRUE(waited.ok());
  ASSERT_EQ(waited->steps.size(), 1u);
  EXPECT_DOUBLE_EQ(waited->steps[0].start_s, 0.010);
  // Without a wait the first request starts alone; the second joins the next step.
  auto eager = SimulateServing(two, Options(8, 512, 0), 64, EverySecond());
  ASSERT_TRUE(eager.ok());
  ASSERT_EQ(eager->steps.size(), 2u);
  EXPECT_DOUBLE_EQ(eager->records[1].ttft_s, 2 - 0.004);
}

TEST(ServingSimulation, LongPromptsArePrefilledInChunksUnderTheTokenBudget) {
  auto result = SimulateServing({{.arrival_s = 0, .prompt_tokens = 10, .output_tokens = 1}},
                                Options(8, 4, 0), 64, EverySecond());
  ASSERT_TRUE(result.ok());
  ASSERT_EQ(result->steps.size(), 3u);  // 4 + 4 + 2 prompt tokens; the last chunk samples
  EXPECT_EQ(result->steps[0].tokens, 4);
  EXPECT_EQ(result->steps[2].tokens, 2);
  EXPECT_DOUBLE_EQ(result->records[0].ttft_s, 3);
}

TEST(ServingSimulation, RefusalsAreRecordedAsLoadgenRecordsThem) {
  // Queue of one: of three simultaneous arrivals, the first waits and the others are refused.
  const SimulatedRequest each{.arrival_s = 0, .prompt_tokens = 2, .output_tokens = 2};
  auto queued =
      SimulateServing({each, each, each}, Options(8, 512, 0, /*max_queue=*/1), 64, EverySecond());
  ASSERT_TRUE(queued.ok());
  EXPECT_TRUE(queued->records[0].ok);
  EXPECT_EQ(queued->records[1].error_code, "RESOURCE_EXHAUSTED");
  EXPECT_EQ(queued->records[2].error_code, "RESOURCE_EXHAUSTED");
  // 2 blocks of 4 positions cannot hold 6 prompt + 4 output tokens.
  auto too_long = SimulateServing({{.arrival_s = 0, .prompt_tokens = 6, .output_tokens = 4}},
                                  Options(8, 512, 0), 2, EverySecond());
  ASSERT_TRUE(too_long.ok());
  EXPECT_FALSE(too_long->records[0].ok);
  EXPECT_EQ(too_long->records[0].error_code, "RESOURCE_EXHAUSTED");
  EXPECT_TRUE(too_long->steps.empty());
}

TEST(ServingSimulation, PreemptedSequencesAreRecomputedAndStillFinish) {
  // Four blocks of 4 positions; two sequences that each grow to 12 positions cannot both fit.
  const SimulatedRequest each{.arrival_s = 0, .prompt_tokens = 4, .output_tokens = 9};
  auto result = SimulateServing({each, each}, Options(8, 512, 0), 4, EverySecond());
  ASSERT_TRUE(result.ok());
  int preempted = 0, recomputed = 0;
  for (const SimulatedStep& step : result->steps) {
    preempted += step.preempted;
    if (&step != &result->steps.front()) recomputed += step.prompt_tokens;
  }
  EXPECT_GT(preempted, 0);
  EXPECT_GT(recomputed, 0);  // the victim's prompt and tokens are fed again
  for (const RequestRecord& r : result->records) {
    EXPECT_TRUE(r.ok);
    EXPECT_EQ(r.output_tokens, 9);
  }
}

TEST(ServingSimulation, AStepsShapeCountsTokensSamplingRowsAndAttendedPositions) {
  StepPlan plan;
  plan.sequences.push_back(
      {.tokens = {1}, .start_position = 99, .want_logits = true});  // decode at 100
  plan.sequences.push_back(
      {.tokens = {1, 2, 3, 4}, .start_position = 0, .want_logits = false});  // prefill chunk
  plan.sequences.push_back(
      {.tokens = {5, 6}, .start_position = 4, .want_logits = true});  // its last chunk
  const planner::StepShape shape = ShapeOfStep(plan, 2, 2);
  EXPECT_EQ(shape.tp, 2);
  EXPECT_EQ(shape.tokens, 7);
  EXPECT_EQ(shape.logit_rows, 2);
  EXPECT_DOUBLE_EQ(shape.attention_positions, 100 + (1 + 2 + 3 + 4) + (5 + 6));
  // Queries that read the KV cache one by one read what they attend to.
  EXPECT_DOUBLE_EQ(shape.attention_read_positions, shape.attention_positions);
  // A kernel that tiles a sequence's queries by 2 reads each chunk's KV once per tile, up to the
  // tile's last query: the decode row 100; the first chunk's tiles 2 and 4; the last chunk's one
  // tile 6.
  EXPECT_DOUBLE_EQ(ShapeOfStep(plan, 2, 2, 2).attention_read_positions, 100 + (2 + 4) + 6);
  // Tiles longer than a chunk: one read of each chunk's positions.
  EXPECT_DOUBLE_EQ(ShapeOfStep(plan, 2, 2, 128).attention_read_positions, 100 + 4 + 6);
}

TEST(ServingSimulation, AClosedLoopSendsEachRequestWhenOneBeforeItEnds) {
  // loadgen --concurrency 1: each request is sent when the one before it ends, whatever the
  // arrival times say. Each takes a prefill step and two decode steps: 3 s.
  const SimulatedRequest each{.arrival_s = 100, .prompt_tokens = 4, .output_tokens = 3};
  auto one = SimulateServing({each, each, each}, Options(8, 512, 0), 64, EverySecond(), /*concurrency=*/1);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  for (const RequestRecord& r : one->records) {
    EXPECT_TRUE(r.ok);
    EXPECT_DOUBLE_EQ(r.ttft_s, 1);
    EXPECT_DOUBLE_EQ(r.e2e_s, 3);
  }
  EXPECT_DOUBLE_EQ(one->duration_s, 9);
  EXPECT_EQ(one->steps.size(), 9u);
  // --concurrency 2: two at a time share every step; the third is sent when the first two end
  // (together, at 3 s) and runs alone, so four requests take two rounds.
  auto two = SimulateServing({each, each, each, each}, Options(8, 512, 0), 64, EverySecond(), 2);
  ASSERT_TRUE(two.ok());
  EXPECT_DOUBLE_EQ(two->duration_s, 6);
  EXPECT_EQ(two->steps.size(), 6u);
  for (const SimulatedStep& step : two->steps) EXPECT_EQ(step.sequences, 2);
}

TEST(ServingSimulation, AClosedLoopClientSendsItsNextRequestWhenOneIsRefused) {
  // Two blocks of 4 positions: the second request (6 + 4 positions) is refused when it is sent,
  // at 3 s, and the third is sent at once.
  const SimulatedRequest fits{.prompt_tokens = 2, .output_tokens = 3};
  const SimulatedRequest too_long{.prompt_tokens = 6, .output_tokens = 4};
  auto result = SimulateServing({fits, too_long, fits}, Options(8, 512, 0), 2, EverySecond(), 1);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_TRUE(result->records[0].ok);
  EXPECT_EQ(result->records[1].error_code, "RESOURCE_EXHAUSTED");
  EXPECT_TRUE(result->records[2].ok);
  EXPECT_DOUBLE_EQ(result->records[2].e2e_s, 3);
  EXPECT_DOUBLE_EQ(result->duration_s, 6);
}

TEST(ServingSimulation, BadWorkloadsAreNamed) {
  auto zero = SimulateServing({{.arrival_s = 0, .prompt_tokens = 0, .output_tokens = 1}},
                              Options(8, 512, 0), 64, EverySecond());
  EXPECT_THAT(zero.status().message(), ::testing::HasSubstr("request 0 needs at least one prompt"));
  auto order = SimulateServing({{.arrival_s = 1}, {.arrival_s = 0.5}}, Options(8, 512, 0), 64,
                               EverySecond());
  EXPECT_THAT(order.status().message(), ::testing::HasSubstr("request 1 arrives before"));
}

}  // namespace
}  // namespace tpserve
