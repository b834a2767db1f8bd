// The continuous-batching policy on plain data: no engine, no threads.
#include "engine/step/scheduler.h"

#include <gtest/gtest.h>

namespace tpserve {
namespace {

std::unique_ptr<ScheduledSequence> Sequence(uint64_t id, int prompt_tokens) {
  auto s = std::make_unique<ScheduledSequence>();
  s->id = id;
  for (int i = 0; i < prompt_tokens; ++i) s->tokens.push_back(100 + i);
  s->prompt_length = s->tokens.size();
  return s;
}

// Applies a decision as the engine loop does: tokens computed, one sampled where logits wanted.
void Complete(const ScheduleDecision& d) {
  for (size_t i = 0; i < d.sequences.size(); ++i) {
    d.sequences[i]->computed += d.plan.sequences[i].tokens.size();
    if (d.plan.sequences[i].want_logits) d.sequences[i]->tokens.push_back(7);
  }
}

TEST(Scheduler, ChunksPromptsUnderTheTokenBudgetAndDecodesFirst) {
  KvBlockPool pool(100);
  Scheduler scheduler({.max_batch_size = 8, .max_batched_tokens = 8, .block_size = 4}, &pool);
  scheduler.Add(Sequence(1, 3));
  ScheduleDecision d = scheduler.Schedule(0);
  ASSERT_EQ(d.plan.sequences.size(), 1u);
  EXPECT_TRUE(d.plan.sequences[0].want_logits);
  Complete(d);
  scheduler.Add(Sequence(2, 20));  // a long prompt arrives while 1 decodes
  for (int step = 1; step <= 3; ++step) {
    d = scheduler.Schedule(step);
    ASSERT_EQ(d.plan.sequences.size(), 2u);
    EXPECT_EQ(d.plan.sequences[0].sequence_id, 1);  // the decode comes first
    EXPECT_EQ(d.plan.sequences[0].tokens.size(), 1u);
    EXPECT_EQ(d.plan.token_count(), step < 3 ? 8 : 1 + 6);  // 7 + 7 + 6 prompt tokens
    EXPECT_EQ(d.plan.sequences[1].want_logits, step == 3);
    EXPECT_EQ(d.plan.sequences[1].start_position, (step - 1) * 7);
    Complete(d);
  }
  EXPECT_EQ(scheduler.running(), 2);
}

TEST(Scheduler, PreemptsTheNewestWhenBlocksRunOutAndRecomputesLater) {
  KvBlockPool pool(4);  // 16 positions
  Scheduler scheduler({.max_batch_size = 8, .max_batched_tokens = 64, .block_size = 4}, &pool);
  scheduler.Add(Sequence(1, 6));
  scheduler.Add(Sequence(2, 6));
  ScheduleDecision d = scheduler.Schedule(0);  // 2 blocks each: the pool is empty
  ASSERT_EQ(d.plan.sequences.size(), 2u);
  EXPECT_EQ(pool.free_blocks(), 0);
  Complete(d);
  for (int step = 1; step <= 2; ++step) {  // positions 6 and 7 still fit in two blocks each
    d = scheduler.Schedule(step);
    EXPECT_TRUE(d.preempted.empty());
    Complete(d);
  }
  d = scheduler.Schedule(3);  // position 8 needs a third block for 1: preempt 2
  ASSERT_EQ(d.preempted, std::vector<uint64_t>{2});
  ASSERT_EQ(d.plan.sequences.size(), 1u);
  EXPECT_EQ(d.plan.sequences[0].sequence_id, 1);
  EXPECT_EQ(scheduler.waiting(), 1);
  Complete(d);
  // When 1 finishes, 2 is recomputed from the start: prompt and the tokens it had generated.
  auto done = scheduler.Remove(1);
  ASSERT_NE(done, nullptr);
  d = scheduler.Schedule(4);
  ASSERT_EQ(d.plan.sequences.size(), 1u);
  EXPECT_EQ(d.plan.sequences[0].sequence_id, 2);
  EXPECT_EQ(d.plan.sequences[0].start_position, 0);
  EXPECT_EQ(d.plan.sequences[0].tokens.size(), 9u);  // 6 prompt + 3 generated
  EXPECT_TRUE(d.plan.sequences[0].want_logits);
  EXPECT_EQ(d.sequences[0]->preemptions, 1);
}

TEST(Scheduler, RespectsMaxBatchSizeAndFreesOnRemove) {
  KvBlockPool pool(100);
  Scheduler scheduler({.max_batch_size = 2, .max_batched_tokens = 64, .block_size = 4}, &pool);
  for (uint64_t id = 1; id <= 4; ++id) scheduler.Add(Sequence(id, 5));
  ScheduleDecision d = scheduler.Schedule(0);
  EXPECT_EQ(d.plan.sequences.size(), 2u);
  EXPECT_EQ(scheduler.waiting(), 2);
  EXPECT_EQ(pool.free_blocks(), 96);
  scheduler.Remove(1);
  scheduler.Remove(3);  // still waiting: nothing to free
  EXPECT_EQ(pool.free_blocks(), 98);
  EXPECT_EQ(scheduler.Remove(42), nullptr);
}

}  // namespace
}  // namespace tpserve
