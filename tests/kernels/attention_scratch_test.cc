// The CUDA attention's scratch bound (kernels/cuda/attention.h), host arithmetic tested on the
// CPU: the decoder allocates it once, before the KV cache is sized, so it must not grow with the
// step or the context; the token chunks it implies must always hold at least one token.
#include <gtest/gtest.h>

#include "kernels/cuda/attention.h"

namespace tpserve::cuda {
namespace {

// Llama-3-8B at TP=1: 32 query heads of 128.
constexpr int kHeads = 32, kHeadDim = 128;

TEST(AttentionScratch, ABoundedScratchReplacesTheSeventeenGigabytesOfAPrefillAt128k) {
  const int context = 131072;  // 512 partitions of 256 positions
  // Unbounded, 2,048 tokens in one launch: tokens × heads × partitions × (head_dim + 2) floats.
  const size_t unbounded = PagedAttentionScratchFloats(2048, kHeads, kHeadDim, context) * sizeof(float);
  EXPECT_EQ(unbounded, size_t{2048} * 32 * 512 * 130 * 4);  // 17.4 GB
  const size_t bounded = PagedAttentionBoundedScratchFloats(kHeads, kHeadDim, context) * sizeof(float);
  EXPECT_EQ(bounded, size_t{16384} * 32 * 130 * 4);  // 272 MB, whatever the step
  EXPECT_EQ(bounded, PagedAttentionBoundedScratchFloats(kHeads, kHeadDim, 512) * sizeof(float));
  // At 128k, 32 tokens per launch; at 512 positions (2 partitions), 8,192.
  const size_t floats = bounded / sizeof(float);
  EXPECT_EQ(PagedAttentionChunkTokens(floats, kHeads, kHeadDim, context), 32);
  EXPECT_EQ(PagedAttentionChunkTokens(floats, kHeads, kHeadDim, 512), 8192);
}

TEST(AttentionScratch, AContextLongerThanTheBudgetStillGetsOneTokenPerLaunch) {
  const int context = 256 * 20000;  // 20,000 partitions, more than the budget's pairs
  const size_t floats = PagedAttentionBoundedScratchFloats(kHeads, kHeadDim, context);
  EXPECT_EQ(floats, size_t{20000} * 32 * 130);
  EXPECT_EQ(PagedAttentionChunkTokens(floats, kHeads, kHeadDim, context), 1);
  EXPECT_EQ(PagedAttentionChunkTokens(floats - 1, kHeads, kHeadDim, context), 0);  // refused by PagedAttention
}

}  // namespace
}  // namespace tpserve::cuda
