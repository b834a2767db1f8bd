#include "engine/step/kv_cache.h"

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

float* RankKvCache::Keys(int layer, int32_t block, int slot) {
  return keys_[layer].data() + Offset(block, slot);
}

float* RankKvCache::Values(int layer, int32_t block, int slot) {
  return values_[layer].data() + Offset(block, slot);
}

cpu::KvLayerView RankKvCache::Layer(int layer) const {
  return {keys_[layer].data(), values_[layer].data(), block_size_, kv_heads_, head_dim_};
}

}  // namespace tpserve
