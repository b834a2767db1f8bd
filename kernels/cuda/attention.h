// Paged causal attention on the GPU, one kernel for decode, prefill and chunked prefill: every
// query token attends to positions [0, position] of its own sequence through that sequence's
// block table (the CPU twin is cpu::AttendOneToken). No CUDA headers; pointers are device memory.
//
// Long contexts are split into partitions of kAttentionPartition positions, each handled by its
// own thread block (flash-decoding), and the partitions are combined in partition order. Every
// sum runs in an order fixed by the token's context length and the head size alone, so a token's
// output never depends on its batch mates or on the step's other sequences.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace tpserve::cuda {

inline constexpr int kAttentionPartition = 256;
// The (token, partition) pairs whose partial results one scratch holds. A step with more (many
// tokens at a long context) runs the attention in token chunks that fit: a token's result does not
// depend on its chunk, so the chunking changes no bit. 16,384 pairs of 32 heads × 130 floats is
// 272 MB (Llama-3-8B at TP=1), whatever the step's size and context.
inline constexpr int kAttentionScratchTokenPartitions = 16384;

inline int AttentionPartitions(int context) {
  return (context + kAttentionPartition - 1) / kAttentionPartition;
}

struct PagedAttentionArgs {
  const float* q = nullptr;               // [tokens, q_stride] f32, RoPE applied; heads at column 0
  int q_stride = 0;
  const float* key_cache = nullptr;       // [num_blocks * block_size, kv_heads, head_dim] f32
  const float* value_cache = nullptr;     // same
  const int32_t* block_tables = nullptr;  // [sequences, block_table_width], padded with -1
  int block_table_width = 0;
  const int32_t* token_sequence = nullptr;  // [tokens] the token's row of block_tables
  const int32_t* positions = nullptr;       // [tokens] the token attends to [0, position]
  float* out = nullptr;                   // [tokens, heads * head_dim] f32
  float* scratch = nullptr;               // scratch_floats floats
  size_t scratch_floats = 0;              // at least PagedAttentionScratchFloats(1, ...)
  int tokens = 0;
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int block_size = 0;
  int max_context = 0;  // the longest context of any token in the step (position + 1)
  float scale = 0;      // 1 / sqrt(head_dim)
};

// Scratch for the partitions' partial results of `tokens` tokens in one launch:
// [tokens, heads, partitions, head_dim + 2].
inline size_t PagedAttentionScratchFloats(int tokens, int heads, int head_dim, int max_context) {
  return static_cast<size_t>(tokens) * heads * AttentionPartitions(max_context) * (head_dim + 2);
}
// The decoder's scratch: kAttentionScratchTokenPartitions pairs, or one token at max_context when
// that is more. Bounded, so that it can be allocated once, before the KV cache is sized.
inline size_t PagedAttentionBoundedScratchFloats(int heads, int head_dim, int max_context) {
  const int pairs = AttentionPartitions(max_context) > kAttentionScratchTokenPartitions
                        ? AttentionPartitions(max_context)
                        : kAttentionScratchTokenPartitions;
  return static_cast<size_t>(pairs) * heads * (head_dim + 2);
}
// How many tokens one launch takes with `scratch_floats` of scratch (0: not even one fits).
inline int PagedAttentionChunkTokens(size_t scratch_floats, int heads, int head_dim, int max_context) {
  const size_t per_token = PagedAttentionScratchFloats(1, heads, head_dim, max_context);
  const size_t tokens = per_token == 0 ? 0 : scratch_floats / per_token;
  return tokens > 1u << 30 ? 1 << 30 : static_cast<int>(tokens);
}

Status PagedAttention(const PagedAttentionArgs& args, void* stream);

// Loads the attention kernels now (kernels/cuda/preload.cuh says why).
Status PreloadAttentionKernels();

}  // namespace tpserve::cuda
