#include "engine/step/kv_block_pool.h"

#include <string>

namespace tpserve {

KvBlockPool::KvBlockPool(int num_blocks) : total_(num_blocks), blocks_(num_blocks) {
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

std::optional<int32_t> KvBlockPool::Allocate() {
  int32_t block;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else if (!idle_.empty()) {
    block = idle_.front();
    Uncache(block);
  } else {
    return std::nullopt;
  }
  blocks_[block].references = 1;
  return block;
}

void KvBlockPool::Free(int32_t block) {
  Block& b = blocks_[block];
  if (--b.references > 0) return;
  if (b.cached) {
    b.idle = idle_.insert(idle_.end(), block);
  } else {
    free_.push_back(block);
  }
}

std::optional<int32_t> KvBlockPool::Find(const Parent& parent, std::span<const int32_t> tokens) const {
  auto it = index_.find(Key{parent, {tokens.begin(), tokens.end()}});
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

void KvBlockPool::Acquire(int32_t block) {
  Block& b = blocks_[block];
  if (b.references++ == 0) idle_.erase(b.idle);
}

int32_t KvBlockPool::Cache(int32_t block, const Parent& parent, std::span<const int32_t> tokens) {
  if (blocks_[block].cached) return block;
  if (std::optional<int32_t> existing = Find(parent, tokens)) return *existing;
  Block& b = blocks_[block];
  b.key = Key{parent, {tokens.begin(), tokens.end()}};
  b.cached = true;
  index_.emplace(b.key, block);
  return block;
}

void KvBlockPool::TakeCachedBlocks(std::span<const int32_t> tokens, int block_size, size_t max_blocks,
                                   PrefixChain* chain, std::vector<int32_t>* found) {
  const size_t size = static_cast<size_t>(block_size);
  while (chain->blocks < max_blocks && (chain->blocks + 1) * size <= tokens.size()) {
    const std::optional<int32_t> block = Find(chain->parent, tokens.subspan(chain->blocks * size, size));
    if (!block) break;
    Acquire(*block);
    found->push_back(*block);
    chain->parent = AsParent(*block);
    ++chain->blocks;
  }
}

void KvBlockPool::CacheFilledBlocks(std::span<const int32_t> tokens, std::span<const int32_t> blocks,
                                    size_t computed, int block_size, PrefixChain* chain) {
  const size_t size = static_cast<size_t>(block_size);
  while ((chain->blocks + 1) * size <= computed && chain->blocks < blocks.size()) {
    const int32_t canonical = Cache(blocks[chain->blocks], chain->parent, tokens.subspan(chain->blocks * size, size));
    chain->parent = AsParent(canonical);
    ++chain->blocks;
  }
}

void KvBlockPool::Uncache(int32_t block) {
  Block& b = blocks_[block];
  index_.erase(b.key);
  if (b.references == 0) idle_.erase(b.idle);
  b.cached = false;
  b.key = Key{};
  ++b.generation;  // blocks cached after this one's old content no longer follow it
}

Status KvBlockPool::CheckInvariants() const {
  auto broken = [](int32_t block, const std::string& what) {
    return Status(StatusCode::kInternal, "KV block " + std::to_string(block) + ": " + what);
  };
  std::vector<int> on_free_list(total_, 0), on_idle_list(total_, 0), in_index(total_, 0);
  for (int32_t block : free_) ++on_free_list[block];
  for (int32_t block : idle_) ++on_idle_list[block];
  for (const auto& [key, block] : index_) {
    ++in_index[block];
    if (!(key == blocks_[block].key)) return broken(block, "indexed under another block's content");
  }
  for (int32_t block = 0; block < total_; ++block) {
    const Block& b = blocks_[block];
    if (b.references < 0) return broken(block, "negative reference count");
    const bool free = b.references == 0 && !b.cached, idle = b.references == 0 && b.cached;
    if (on_free_list[block] != (free ? 1 : 0)) {
      return broken(block, free ? "free but not on the free list once" : "on the free list but not free");
    }
    if (on_idle_list[block] != (idle ? 1 : 0)) {
      return broken(block, idle ? "idle cached but not in the eviction order once"
                                : "in the eviction order but referenced or not cached");
    }
    if (in_index[block] != (b.cached ? 1 : 0)) return broken(block, "cached and indexed disagree");
  }
  return Status::Ok();
}

}  // namespace tpserve
