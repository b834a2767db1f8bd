#include "engine/step/packed_step.h"

#include <gtest/gtest.h>

#include <set>

namespace tpserve {
namespace {

// A decode token at position 5 (block 7 covers 4..7) and a 3-token prompt chunk at 2..4 whose
// positions cross from block 2 into block 9; blocks of 4 tokens. Expected values by hand.
TEST(PackedStep, ADecodeAndAPrefillChunkPackAsWorkedOutByHand) {
  StepPlan plan;
  plan.sequences.push_back({.sequence_id = 10, .tokens = {42}, .start_position = 5, .block_table = {3, 7}});
  plan.sequences.push_back(
      {.sequence_id = 11, .tokens = {1, 2, 3}, .start_position = 2, .block_table = {2, 9}, .want_logits = false});
  auto packed = PackStep(plan, 4);
  ASSERT_TRUE(packed.ok()) << packed.status().ToString();
  EXPECT_EQ(packed->num_tokens, 4);
  EXPECT_EQ(packed->num_sequences, 2);
  EXPECT_EQ(packed->token_ids, (std::vector<int32_t>{42, 1, 2, 3}));
  EXPECT_EQ(packed->positions, (std::vector<int32_t>{5, 2, 3, 4}));
  EXPECT_EQ(packed->slot_mapping, (std::vector<int32_t>{29, 10, 11, 36}));  // 7*4+1, 2*4+2, 2*4+3, 9*4+0
  EXPECT_EQ(packed->token_sequence, (std::vector<int32_t>{0, 1, 1, 1}));
  EXPECT_EQ(packed->query_start, (std::vector<int32_t>{0, 1, 4}));
  EXPECT_EQ(packed->context_lengths, (std::vector<int32_t>{6, 5}));
  EXPECT_EQ(packed->block_table_width, 2);
  EXPECT_EQ(packed->block_tables, (std::vector<int32_t>{3, 7, 2, 9}));
  EXPECT_EQ(packed->logit_tokens, (std::vector<int32_t>{0}));
  const std::vector<int32_t> all = packed->Concatenated();
  EXPECT_EQ(all.size(), 4u * 4 + 3 + 2 + 4 + 1);
}

TEST(PackedStep, ShortBlockTablesArePaddedAndEverySlotIsDistinct) {
  StepPlan plan;
  plan.sequences.push_back({.sequence_id = 1, .tokens = {5}, .start_position = 0, .block_table = {4}});
  plan.sequences.push_back({.sequence_id = 2, .tokens = {6, 7, 8, 9, 10}, .start_position = 0, .block_table = {0, 1, 5}});
  auto packed = PackStep(plan, 2);
  ASSERT_TRUE(packed.ok());
  EXPECT_EQ(packed->block_tables, (std::vector<int32_t>{4, -1, -1, 0, 1, 5}));
  EXPECT_EQ(packed->logit_tokens, (std::vector<int32_t>{0, 5}));
  const std::set<int32_t> slots(packed->slot_mapping.begin(), packed->slot_mapping.end());
  EXPECT_EQ(slots.size(), packed->slot_mapping.size());
}

// A table allocated ahead (blocks for positions the step does not reach) packs only the blocks
// the step's positions reach: the GPU's limits and graph buckets follow the context, not the
// allocation.
TEST(PackedStep, BlocksAllocatedAheadAreLeftOut) {
  StepPlan plan;
  plan.sequences.push_back({.sequence_id = 1, .tokens = {5, 6, 7}, .start_position = 0, .block_table = {4, 9, 8, 7}});
  plan.sequences.push_back({.sequence_id = 2, .tokens = {1}, .start_position = 4, .block_table = {0, 1, 2, 3, 6}});
  auto packed = PackStep(plan, 2);
  ASSERT_TRUE(packed.ok()) << packed.status().ToString();
  EXPECT_EQ(packed->block_table_width, 3);  // sequence 2 reaches position 4: block 2 of its table
  EXPECT_EQ(packed->block_tables, (std::vector<int32_t>{4, 9, -1, 0, 1, 2}));
  EXPECT_EQ(packed->context_lengths, (std::vector<int32_t>{3, 5}));
}

TEST(PackedStep, BadPlansAreRefusedNamingTheSequence) {
  StepPlan short_table;
  short_table.sequences.push_back({.sequence_id = 3, .tokens = {1, 2, 3}, .start_position = 3, .block_table = {0}});
  auto refused = PackStep(short_table, 4);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(), "sequence 3: 6 positions need 2 KV blocks, the block table has 1");
  StepPlan empty;
  empty.sequences.push_back({.sequence_id = 4, .block_table = {0}});
  EXPECT_EQ(PackStep(empty, 4).status().message(), "sequence 4: no tokens in the step");
  StepPlan negative_block;
  negative_block.sequences.push_back({.sequence_id = 5, .tokens = {1}, .block_table = {-1}});
  EXPECT_EQ(PackStep(negative_block, 4).status().message(), "sequence 5: block -1 is not a valid KV block");
  EXPECT_FALSE(PackStep(StepPlan{}, 0).ok());
}

}  // namespace
}  // namespace tpserve

namespace tpserve {
namespace {

SequencePlan Wanting(SamplingParams sampling, int sampled = 0) {
  return SequencePlan{.sequence_id = 1, .tokens = {5}, .start_position = 0, .block_table = {0},
                      .want_logits = true, .sampling = std::move(sampling), .sampled_tokens = sampled};
}

TEST(PlanDeviceSampling, GreedyRowsWithoutLogprobsGoToTheDeviceWithSampleTokensBans) {
  const std::vector<int> eos = {2, 9};
  StepPlan plan;
  plan.sequences.push_back(Wanting({}));                                   // greedy: device, no bans
  plan.sequences.push_back(Wanting({.temperature = 0.7f}));                // temperature: host
  plan.sequences.push_back(Wanting({.logprobs = 3}));                      // logprobs: host
  SequencePlan prefill = Wanting({});
  prefill.want_logits = false;                                             // no row at all
  plan.sequences.push_back(prefill);
  // Before min_tokens: stop ids (duplicated, one outside the vocabulary) and eos, sorted and unique.
  plan.sequences.push_back(Wanting({.min_tokens = 4, .stop_token_ids = {7, 2, 7, 500}}, /*sampled=*/3));
  plan.sequences.push_back(Wanting({.min_tokens = 4, .stop_token_ids = {7}}, /*sampled=*/4));  // reached: no bans
  plan.sequences.push_back(Wanting({.min_tokens = 4, .ignore_eos = true, .stop_token_ids = {7}}));  // eos allowed
  plan.sequences.push_back(Wanting({.temperature = 1e-6f}));               // below kGreedyTemperature: greedy
  const DeviceSamplingPlan out = PlanDeviceSampling(plan, eos, /*vocab_size=*/100);
  EXPECT_EQ(out.on_device, (std::vector<int32_t>{1, 0, 0, 1, 1, 1, 1}));
  EXPECT_FALSE(out.all_on_device());
  EXPECT_EQ(out.banned_offsets, (std::vector<int32_t>{0, 0, 0, 0, 3, 3, 4, 4}));
  EXPECT_EQ(out.banned_ids, (std::vector<int32_t>{2, 7, 9, 7}));
}

TEST(PlanDeviceSampling, BansThatCoverTheWholeVocabularyAreDropped) {
  StepPlan plan;
  plan.sequences.push_back(Wanting({.min_tokens = 1, .stop_token_ids = {0, 1, 2}}));
  const DeviceSamplingPlan out = PlanDeviceSampling(plan, std::vector<int>{1}, /*vocab_size=*/3);
  EXPECT_TRUE(out.all_on_device());
  EXPECT_EQ(out.banned_offsets, (std::vector<int32_t>{0, 0}));
  EXPECT_TRUE(out.banned_ids.empty());
}

TEST(MoveManyBansToHost, RowsOverTheLimitGoToTheHostAndTheRestKeepTheirBansInOrder) {
  DeviceSamplingPlan plan{.on_device = {1, 1, 0, 1},
                          .banned_offsets = {0, 2, 5, 9, 10},
                          .banned_ids = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}};
  // Rows of 2, 3, 4 and 1 bans with a limit of 3: row 2 (already on the host) loses its bans.
  EXPECT_EQ(MoveManyBansToHost(3, &plan), 1);
  EXPECT_EQ(plan.on_device, (std::vector<int32_t>{1, 1, 0, 1}));
  EXPECT_EQ(plan.banned_offsets, (std::vector<int32_t>{0, 2, 5, 5, 6}));
  EXPECT_EQ(plan.banned_ids, (std::vector<int32_t>{1, 2, 3, 4, 5, 10}));
  // With a limit of 1, rows 0 and 1 move too; every row's bans then fit rows x 1.
  EXPECT_EQ(MoveManyBansToHost(1, &plan), 2);
  EXPECT_EQ(plan.on_device, (std::vector<int32_t>{0, 0, 0, 1}));
  EXPECT_EQ(plan.banned_offsets, (std::vector<int32_t>{0, 0, 0, 0, 1}));
  EXPECT_EQ(plan.banned_ids, (std::vector<int32_t>{10}));
  EXPECT_FALSE(plan.all_on_device());
}

TEST(HostLogitRows, EveryRowWhenLogitsAreWantedElseOnlyTheHostsRows) {
  const DeviceSamplingPlan plan{.on_device = {1, 0, 1, 1, 0}, .banned_offsets = {0, 0, 0, 0, 0, 0}};
  EXPECT_EQ(HostLogitRows(plan, /*return_logits=*/true), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(HostLogitRows(plan, /*return_logits=*/false), (std::vector<int32_t>{1, 4}));
  const DeviceSamplingPlan all_on_device{.on_device = {1, 1}, .banned_offsets = {0, 0, 0}};
  EXPECT_TRUE(HostLogitRows(all_on_device, false).empty());
}

}  // namespace
}  // namespace tpserve
