#include "engine/step/kv_cache.h"

#include <algorithm>

#include "common/dtype.h"

namespace tpserve {

RankKvCache::RankKvCache(int layers, int num_blocks, int block_size, int kv_heads, int head_dim,
                         cpu::KvDtype dtype)
    : block_size_(block_size), kv_heads_(kv_heads), head_dim_(head_dim), dtype_(dtype) {
  const size_t per_layer =
      static_cast<size_t>(num_blocks) * block_size * kv_heads * head_dim * cpu::KvDtypeBytes(dtype);
  // Each buffer zeroed in place: assign(layers, Buffer(n)) zeroed one and copied it to every layer,
  // touching the whole cache twice (a third of a test server's start under ASan).
  keys_.reserve(layers);
  values_.reserve(layers);
  for (int layer = 0; layer < layers; ++layer) {
    keys_.emplace_back(per_layer);
    values_.emplace_back(per_layer);
  }
}

namespace {

// One row of head_dim elements into the cache's own type at element offset `at` of `buffer`.
void StoreRow(const float* row, int head_dim, cpu::KvDtype dtype, size_t at, std::byte* buffer) {
  if (dtype == cpu::KvDtype::kBf16) {
    uint16_t* to = reinterpret_cast<uint16_t*>(buffer) + at;
    for (int i = 0; i < head_dim; ++i) to[i] = F32ToBF16(row[i]);
  } else {
    std::copy_n(row, head_dim, reinterpret_cast<float*>(buffer) + at);
  }
}

}  // namespace

void RankKvCache::Store(int layer, int32_t block, int slot, const float* keys,
                        const float* values) {
  const cpu::KvLayerView layout = Layer(layer);
  for (int kv_head = 0; kv_head < kv_heads_; ++kv_head) {
    const size_t at = layout.RowOffset(block, kv_head, slot),
                 from = static_cast<size_t>(kv_head) * head_dim_;
    StoreRow(keys + from, head_dim_, dtype_, at, keys_[layer].data());
    StoreRow(values + from, head_dim_, dtype_, at, values_[layer].data());
  }
}

void RankKvCache::PrefetchStore(int layer, int32_t block, int slot) const {
  const cpu::KvLayerView layout = Layer(layer);
  const size_t row_bytes = static_cast<size_t>(head_dim_) * cpu::KvDtypeBytes(dtype_);
  for (int kv_head = 0; kv_head < kv_heads_; ++kv_head) {
    const size_t at = layout.RowOffset(block, kv_head, slot) * cpu::KvDtypeBytes(dtype_);
    for (size_t offset = 0; offset < row_bytes; offset += 64) {
      __builtin_prefetch(keys_[layer].data() + at + offset, /*rw=*/1);
      __builtin_prefetch(values_[layer].data() + at + offset, /*rw=*/1);
    }
  }
}

cpu::KvLayerView RankKvCache::Layer(int layer) const {
  return {keys_[layer].data(), values_[layer].data(), block_size_, kv_heads_, head_dim_, dtype_};
}

}  // namespace tpserve
