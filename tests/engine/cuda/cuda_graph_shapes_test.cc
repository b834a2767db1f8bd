#include "engine/cuda/cuda_graph_shapes.h"

#include <gtest/gtest.h>

namespace tpserve {
namespace {

StepPlan DecodePlan() {
  // Two decode tokens, blocks of 4: sequence 1 at position 5 (blocks 3, 7), sequence 2 at 0 (block
  // 2).
  StepPlan plan;
  plan.sequences.push_back(
      {.sequence_id = 1, .tokens = {42}, .start_position = 5, .block_table = {3, 7}});
  plan.sequences.push_back(
      {.sequence_id = 2, .tokens = {43}, .start_position = 0, .block_table = {2}});
  return plan;
}

TEST(CudaGraphShapes, BucketsAreVllmsBatchSizesAndPowersOfTwoContexts) {
  EXPECT_EQ(CudaGraphBatchSizes(32), (std::vector<int>{1, 2, 4, 8, 16, 24, 32}));
  EXPECT_EQ(CudaGraphBatchSizes(3), (std::vector<int>{1, 2}));
  EXPECT_EQ(CudaGraphContextSizes(3000), (std::vector<int>{256, 512, 1024, 2048, 3000}));
  EXPECT_EQ(CudaGraphContextSizes(256), (std::vector<int>{256}));
  const std::vector<int> sizes = CudaGraphBatchSizes(32);
  EXPECT_EQ(BucketFor(1, sizes), 1);
  EXPECT_EQ(BucketFor(3, sizes), 4);
  EXPECT_EQ(BucketFor(17, sizes), 24);
  EXPECT_EQ(BucketFor(32, sizes), 32);
  EXPECT_EQ(BucketFor(33, sizes), 0) << "larger than every graph: eager";
}

TEST(CudaGraphShapes, OnlyPureDecodeStepsQualify) {
  auto decode = PackStep(DecodePlan(), 4);
  ASSERT_TRUE(decode.ok());
  EXPECT_TRUE(IsPureDecode(*decode));
  StepPlan prefill = DecodePlan();
  prefill.sequences[1].tokens = {43, 44};
  prefill.sequences[1].block_table = {2};
  auto chunk = PackStep(prefill, 4);
  ASSERT_TRUE(chunk.ok());
  EXPECT_FALSE(IsPureDecode(*chunk));
  StepPlan quiet = DecodePlan();
  quiet.sequences[0].want_logits = false;
  auto no_logits = PackStep(quiet, 4);
  ASSERT_TRUE(no_logits.ok());
  EXPECT_FALSE(IsPureDecode(*no_logits));
}

// Worked out by hand: the real rows keep every value, widened tables are padded with -1, and the
// padding rows write no KV and read block 0 only.
TEST(CudaGraphShapes, PaddingKeepsTheRealRowsAndAddsInertOnes) {
  auto packed = PackStep(DecodePlan(), 4);
  ASSERT_TRUE(packed.ok());
  DeviceSamplingPlan sampling{.on_device = {1, 0}, .banned_offsets = {0, 1, 1}, .banned_ids = {9}};
  ASSERT_TRUE(PadDecodeStep(4, 3, &*packed, &sampling).ok());
  EXPECT_EQ(packed->num_tokens, 4);
  EXPECT_EQ(packed->num_sequences, 4);
  EXPECT_EQ(packed->block_table_width, 3);
  EXPECT_EQ(packed->token_ids, (std::vector<int32_t>{42, 43, 0, 0}));
  EXPECT_EQ(packed->positions, (std::vector<int32_t>{5, 0, 0, 0}));
  EXPECT_EQ(packed->slot_mapping, (std::vector<int32_t>{29, 8, -1, -1}));
  EXPECT_EQ(packed->token_sequence, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(packed->query_start, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(packed->context_lengths, (std::vector<int32_t>{6, 1, 1, 1}));
  EXPECT_EQ(packed->block_tables,
            (std::vector<int32_t>{3, 7, -1, 2, -1, -1, 0, -1, -1, 0, -1, -1}));
  EXPECT_EQ(packed->logit_tokens, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(sampling.on_device, (std::vector<int32_t>{1, 0, 0, 0}));
  EXPECT_EQ(sampling.banned_offsets, (std::vector<int32_t>{0, 1, 1, 1, 1}));
  EXPECT_EQ(sampling.banned_ids, (std::vector<int32_t>{9}));
  // The concatenated layout now depends on the bucket alone.
  EXPECT_EQ(packed->Concatenated().size(), 4u * 4 + 5 + 4 + 4 * 3 + 4);
}

TEST(CudaGraphShapes, AStepLargerThanItsGraphIsRefused) {
  auto packed = PackStep(DecodePlan(), 4);
  ASSERT_TRUE(packed.ok());
  EXPECT_FALSE(PadDecodeStep(1, 3, &*packed, nullptr).ok());
  EXPECT_FALSE(PadDecodeStep(4, 1, &*packed, nullptr).ok());
}

}  // namespace
}  // namespace tpserve
