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
  float* scratch = nullptr;               // PagedAttentionScratchFloats(...) floats
  int tokens = 0;
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int block_size = 0;
  int max_context = 0;  // the longest context of any token in the step (position + 1)
  float scale = 0;      // 1 / sqrt(head_dim)
};

// Scratch for the partitions' partial results: [tokens, heads, partitions, head_dim + 2].
size_t PagedAttentionScratchFloats(int tokens, int heads, int head_dim, int max_context);

Status PagedAttention(const PagedAttentionArgs& args, void* stream);

}  // namespace tpserve::cuda
