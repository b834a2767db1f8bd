// The paged KV cache. Block ids are global (the engine's KvBlockPool, kv_block_pool.h, hands them
// out and every rank uses the same ids); each rank stores only its own KV heads for every block.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/huge_page_allocator.h"
#include "engine/step/kv_block_pool.h"
#include "kernels/cpu/ops.h"

namespace tpserve {

class RankKvCache {
 public:
  RankKvCache(int layers, int num_blocks, int block_size, int kv_heads, int head_dim,
              cpu::KvDtype dtype = cpu::KvDtype::kF32);

  // Position `slot` of `block`, for `layer`: keys and values [kv_heads, head_dim] each, stored
  // head by head (the blocks are head-major: cpu::KvLayerView), as the cache's dtype (bf16:
  // rounded to nearest even).
  void Store(int layer, int32_t block, int slot, const float* keys, const float* values);
  // Asks for the cache lines that Store(layer, block, slot, ...) will write, for writing (a hint;
  // nothing changes). The rows are cold, and a decode step's stores waited on memory for each.
  void PrefetchStore(int layer, int32_t block, int slot) const;
  cpu::KvLayerView Layer(int layer) const;

  int block_size() const { return block_size_; }
  cpu::KvDtype dtype() const { return dtype_; }
  static size_t BytesPerBlock(int layers, int block_size, int kv_heads, int head_dim,
                              cpu::KvDtype dtype = cpu::KvDtype::kF32) {
    return 2ull * layers * block_size * kv_heads * head_dim * cpu::KvDtypeBytes(dtype);
  }

 private:
  int block_size_, kv_heads_, head_dim_;
  cpu::KvDtype dtype_;
  using Buffer = std::vector<std::byte, HugePageAllocator<std::byte>>;
  std::vector<Buffer> keys_;    // per layer: [num_blocks, kv_heads, block_size, head_dim] of dtype_
  std::vector<Buffer> values_;  // per layer: same
};

}  // namespace tpserve
