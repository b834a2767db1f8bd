// The paged KV cache. Block ids are global (the engine's KvBlockPool, kv_block_pool.h, hands them
// out and every rank uses the same ids); each rank stores only its own KV heads for every block.
#pragma once

#include <cstdint>
#include <vector>

#include "common/huge_page_allocator.h"
#include "engine/step/kv_block_pool.h"
#include "kernels/cpu/ops.h"

namespace tpserve {

class RankKvCache {
 public:
  RankKvCache(int layers, int num_blocks, int block_size, int kv_heads, int head_dim);

  // Where position `slot` of `block` keeps its keys/values for `layer`: [kv_heads, head_dim].
  float* Keys(int layer, int32_t block, int slot);
  float* Values(int layer, int32_t block, int slot);
  cpu::KvLayerView Layer(int layer) const;

  int block_size() const { return block_size_; }
  static size_t BytesPerBlock(int layers, int block_size, int kv_heads, int head_dim) {
    return 2ull * layers * block_size * kv_heads * head_dim * sizeof(float);
  }

 private:
  size_t Offset(int32_t block, int slot) const {
    return (static_cast<size_t>(block) * block_size_ + slot) * kv_heads_ * head_dim_;
  }

  int block_size_, kv_heads_, head_dim_;
  using Buffer = std::vector<float, HugePageAllocator<float>>;
  std::vector<Buffer> keys_;    // per layer: [num_blocks, block_size, kv_heads, head_dim]
  std::vector<Buffer> values_;  // per layer: same
};

}  // namespace tpserve
