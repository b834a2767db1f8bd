// Issue 31: the serving simulation makes the server's decisions, not a copy of them. The same
// requests, all waiting before the first step, are planned step by step alike by the running
// engine loop on the tiny model and by SimulateServing with its step times stubbed. The KV cache
// holds 32 blocks of 4 positions, less than the requests grow to, so preemption and recomputation
// are part of the comparison, and so is the prefix cache: a preempted sequence finds the blocks it
// cached while they were not evicted.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <tuple>

#include "planner/serving_simulation.h"
#include "server/engine_loop.h"
#include "tests/engine/engine_test_util.h"
#include "tests/server/counting_sink.h"

namespace tpserve {
namespace {

using testing::CountingSink;

// A plan as (sequence, start, tokens fed, samples) rows.
using Row = std::tuple<int64_t, int32_t, size_t, bool>;
std::vector<Row> RowsOf(const StepPlan& plan) {
  std::vector<Row> rows;
  for (const SequencePlan& p : plan.sequences)
    rows.emplace_back(p.sequence_id, p.start_position, p.tokens.size(), p.want_logits);
  return rows;
}

TEST(SimulationMatchesServer, EveryStepIsPlannedAsTheEngineLoopPlansIt) {
  constexpr int kBlocks = 32, kBlockSize = 4;
  EngineOptions engine_options{
      .tp = 1, .threads = 2, .block_size = kBlockSize, .kv_cache_blocks = kBlocks};
  auto engine = Engine::Create(testing::TinyModel(), engine_options);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  EngineLoopOptions options{
      .scheduler = {.max_batch_size = 6, .max_batched_tokens = 16, .block_size = kBlockSize},
      .max_queue = 64,
      .max_wait_us = 0};
  // Prompts of 3 to 14 tokens (chunked at 16 tokens a step), outputs of 9 to 31 tokens.
  std::vector<SimulatedRequest> requests;
  for (int i = 0; i < 10; ++i) {
    requests.push_back(
        {.arrival_s = 0, .prompt_tokens = 3 + (i * 5) % 12, .output_tokens = 9 + (i * 7) % 23});
  }

  std::vector<std::vector<Row>> served, simulated;
  ServerMetrics metrics;
  EngineLoop loop(engine->get(), &testing::TinyModel().tokenizer, options, &metrics);
  loop.ObservePlans([&](const StepPlan& plan) { served.push_back(RowsOf(plan)); });
  std::atomic<int> ended{0};
  for (size_t i = 0; i < requests.size(); ++i) {  // all in the inbox before the loop starts
    const SimulatedRequest& r = requests[i];
    ServeRequest request;
    // Prompts that share no block, as the simulation's own (SimulatedPrompt) share none: the
    // prefix cache (on) finds only what a sequence cached before it was preempted, in both.
    for (int t = 0; t < r.prompt_tokens; ++t) request.prompt.push_back(static_cast<int32_t>(1000 + 100 * i + t));
    request.max_tokens = r.output_tokens;
    request.sampling.ignore_eos = true;
    request.sink = std::make_shared<CountingSink>(&ended);
    ASSERT_TRUE(loop.Submit(std::move(request)).ok());
  }
  loop.Start();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (loop.in_flight() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  loop.Stop();
  ASSERT_EQ(ended.load(), 10);
  EXPECT_GT(metrics.preemptions.load(), 0u) << "the case should exercise preemption";
  EXPECT_GT(metrics.prefix_cache_hits.load(), 0u) << "and a preempted sequence's own cached blocks";

  auto result = SimulateServing(requests, options, kBlocks, [&](const ScheduleDecision& decision) {
    simulated.push_back(RowsOf(decision.plan));
    return 0.001;
  });
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  for (const RequestRecord& r : result->records) EXPECT_TRUE(r.ok);
  ASSERT_EQ(served.size(), simulated.size());
  for (size_t step = 0; step < served.size(); ++step)
    ASSERT_EQ(served[step], simulated[step]) << "step " << step;
}

}  // namespace
}  // namespace tpserve
