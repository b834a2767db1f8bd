// KV block ids and their owners, with an automatic prefix cache. Blocks are reference-counted: a
// block is free (no references, no cached content), cached and idle (no references, its KV kept
// for a later prompt that starts the same way), or referenced by one sequence or more. Allocate
// takes a free block first and evicts the least recently used idle cached block only when none is
// left, so cached prefixes stay until the pool needs their room.
//
// A cached block is identified exactly, by no hash at all: by the block before it in its sequence
// (its id and its generation then; the generation changes whenever that block is evicted and
// reused) and its own tokens. A lookup walks a prompt's blocks from its first, so a block matches only when
// every token before it matched too, and two prompts share a block only when they agree on every
// token up to its end. Batch-invariant kernels then make the shared KV bitwise the KV that
// recomputing it would give. The ids are global: every rank stores its own heads of each block.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <map>
#include <vector>

#include "common/status.h"

namespace tpserve {

class KvBlockPool {
 public:
  static constexpr int32_t kNoParent = -1;  // the parent of a sequence's first block

  explicit KvBlockPool(int num_blocks);

  // A block with one reference: a free one, else the least recently used idle cached block
  // (dropping it from the cache); none when every block is referenced.
  std::optional<int32_t> Allocate();
  // Drops a reference. At zero a cached block stays cached (idle, evictable); any other is free.
  void Free(int32_t block);

  // A block as a parent: its id and its generation when it held the content a child follows. A
  // sequence records it when it takes or caches a block, so that a parent evicted and reused later
  // (its generation bumped) never leads a lookup to this sequence's children.
  struct Parent {
    int32_t block = kNoParent;
    uint64_t generation = 0;
    auto operator<=>(const Parent&) const = default;
  };
  // `block` as a parent now (it must be cached, or referenced by the caller).
  Parent AsParent(int32_t block) const { return {block, blocks_[block].generation}; }

  // The cached block that follows `parent` ({} : a sequence's first) with these tokens.
  std::optional<int32_t> Find(const Parent& parent, std::span<const int32_t> tokens) const;
  // Another reference to a block Find returned (an idle one leaves the eviction order).
  void Acquire(int32_t block);
  // Caches a referenced, uncached block whose KV now holds `tokens` after `parent`. Returns the
  // block that stands for this content from now on: `block`, or an equal one cached before it
  // (then `block` stays uncached and is freed as usual when its references end). A block that is
  // cached already keeps its content and is returned.
  int32_t Cache(int32_t block, const Parent& parent, std::span<const int32_t> tokens);

  // A sequence's place in the cache: its leading full blocks that are cached (taken from the
  // cache or cached as they filled), and the block the next one follows.
  struct PrefixChain {
    size_t blocks = 0;
    Parent parent;
  };
  // Takes the cached blocks that continue `chain` with the next full blocks of `tokens`, until the
  // chain holds `max_blocks` or the cache has no match: each acquired, appended to `found`.
  void TakeCachedBlocks(std::span<const int32_t> tokens, int block_size, size_t max_blocks, PrefixChain* chain,
                        std::vector<int32_t>* found);
  // Caches the blocks after `chain` that the first `computed` positions of `tokens` fill
  // (`blocks`: the sequence's blocks in position order).
  void CacheFilledBlocks(std::span<const int32_t> tokens, std::span<const int32_t> blocks, size_t computed,
                         int block_size, PrefixChain* chain);

  // Blocks Allocate can hand out: free ones and idle cached ones.
  int free_blocks() const { return static_cast<int>(free_.size() + idle_.size()); }
  int cached_blocks() const { return static_cast<int>(index_.size()); }
  int total_blocks() const { return total_; }
  int references(int32_t block) const { return blocks_[block].references; }
  bool cached(int32_t block) const { return blocks_[block].cached; }

  // Every block in exactly one state (free, idle cached, referenced), the free list and the
  // eviction order holding exactly the free and the idle cached ones, the index exactly the
  // cached ones: an error naming the first block that breaks it.
  Status CheckInvariants() const;

 private:
  struct Key {
    Parent parent;
    std::vector<int32_t> tokens;
    auto operator<=>(const Key&) const = default;
  };
  struct Block {
    int references = 0;
    uint64_t generation = 0;  // bumped when the block's content is dropped from the cache
    bool cached = false;
    Key key;                             // while cached
    std::list<int32_t>::iterator idle;   // while cached with no references
  };

  void Uncache(int32_t block);

  int total_;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_;  // a stack: the most recently freed block is reused first
  std::list<int32_t> idle_;    // idle cached blocks, least recently used first
  // Cached content -> its block. Ordered by the key itself, not hashed: no prompt can be crafted
  // to make lookups slow (a hash table's buckets can be flooded) or to match another's block.
  std::map<Key, int32_t> index_;
};

}  // namespace tpserve
