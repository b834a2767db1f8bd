#include "engine/step/kv_cache.h"

#include <algorithm>

namespace tpserve {

RankKvCache::RankKvCache(int layers, int num_blocks, int block_size, int kv_heads, int head_dim)
    : block_size_(block_size), kv_heads_(kv_heads), head_dim_(head_dim) {
  const size_t per_layer = static_cast<size_t>(num_blocks) * block_size * kv_heads * head_dim;
  // Each buffer zeroed in place: assign(layers, Buffer(n)) zeroed one and copied it to every layer,
  // touching the whole cache twice (a third of a test server's start under ASan).
  keys_.reserve(layers);
  values_.reserve(layers);
  for (int layer = 0; layer < layers; ++layer) {
    keys_.emplace_back(per_layer);
    values_.emplace_back(per_layer);
  }
}

void RankKvCache::Store(int layer, int32_t block, int slot, const float* keys,
                        const float* values) {
  const cpu::KvLayerView layout = Layer(layer);
  for (int kv_head = 0; kv_head < kv_heads_; ++kv_head) {
    const size_t at = layout.RowOffset(block, kv_head, slot),
                 from = static_cast<size_t>(kv_head) * head_dim_;
    std::copy_n(keys + from, head_dim_, keys_[layer].data() + at);
    std::copy_n(values + from, head_dim_, values_[layer].data() + at);
  }
}

cpu::KvLayerView RankKvCache::Layer(int layer) const {
  return {keys_[layer].data(), values_[layer].data(), block_size_, kv_heads_, head_dim_};
}

}  // namespace tpserve
