// The prefix cache on plain data: the block pool's reference counts, exact matching and eviction,
// a randomized stress test of its invariants, and the scheduler's use of it (issue 32).
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "engine/step/kv_block_pool.h"
#include "engine/step/scheduler.h"

namespace tpserve {
namespace {

using Parent = KvBlockPool::Parent;
constexpr Parent kRoot{};

std::vector<int32_t> Tokens(int first, int count) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < count; ++i) tokens.push_back(first + i);
  return tokens;
}

TEST(KvBlockPool, ACachedBlockOutlivesItsReferencesUntilThePoolNeedsIt) {
  KvBlockPool pool(3);
  const std::vector<int32_t> a = Tokens(10, 4), b = Tokens(20, 4);
  const int32_t first = *pool.Allocate();
  EXPECT_EQ(pool.Cache(first, kRoot, a), first);
  const int32_t second = *pool.Allocate();
  EXPECT_EQ(pool.Cache(second, pool.AsParent(first), b), second);
  EXPECT_FALSE(pool.Find(kRoot, b).has_value());  // b only after a
  EXPECT_FALSE(pool.Find(pool.AsParent(second), b).has_value());
  EXPECT_EQ(pool.Find(pool.AsParent(first), b), second);
  pool.Free(first);
  pool.Free(second);
  EXPECT_EQ(pool.free_blocks(), 3);  // idle cached blocks count as free
  EXPECT_EQ(pool.cached_blocks(), 2);
  // Another sequence takes the cached prefix: references, not copies.
  pool.Acquire(*pool.Find(kRoot, a));
  EXPECT_EQ(pool.references(first), 1);
  EXPECT_EQ(pool.free_blocks(), 2);
  // The pool needs room: the never-cached block first, then the least recently used idle one
  // (second), never the referenced first.
  const int32_t fresh = *pool.Allocate();
  EXPECT_NE(fresh, first);
  EXPECT_NE(fresh, second);
  EXPECT_EQ(pool.Allocate(), second);
  EXPECT_FALSE(pool.Allocate().has_value());
  EXPECT_FALSE(pool.Find(pool.AsParent(first), b).has_value());  // evicted with its content
  EXPECT_EQ(pool.cached_blocks(), 1);
  EXPECT_TRUE(pool.CheckInvariants().ok()) << pool.CheckInvariants().ToString();
}

TEST(KvBlockPool, EqualContentIsCachedOnceAndAReusedParentOrphansItsChildren) {
  KvBlockPool pool(4);
  const std::vector<int32_t> a = Tokens(1, 4), b = Tokens(5, 4);
  const int32_t one = *pool.Allocate(), two = *pool.Allocate();
  EXPECT_EQ(pool.Cache(one, kRoot, a), one);
  EXPECT_EQ(pool.Cache(two, kRoot, a), one);  // computed twice, cached once
  EXPECT_EQ(pool.cached_blocks(), 1);
  const int32_t child = *pool.Allocate();
  pool.Cache(child, pool.AsParent(one), b);
  pool.Free(two);  // uncached: straight back to the free list
  EXPECT_EQ(pool.references(two), 0);
  pool.Free(child);
  pool.Free(one);
  // `one` is evicted and reused for other tokens: its old child must not follow the new content.
  // Take every block; `one` was idle longest after `child`... evict both and re-cache `one`.
  std::vector<int32_t> taken;
  while (auto block = pool.Allocate()) taken.push_back(*block);
  EXPECT_EQ(pool.cached_blocks(), 0);
  pool.Cache(one, kRoot, a);  // the same tokens again, but new content for `one`
  EXPECT_FALSE(pool.Find(pool.AsParent(one), b).has_value());
  for (int32_t block : taken) pool.Free(block);
  EXPECT_TRUE(pool.CheckInvariants().ok()) << pool.CheckInvariants().ToString();
}

// A sequence that computed a block equal to one cached before it chains its next block after that
// canonical block, which it does not hold: if the canonical block is evicted and reused for other
// tokens meanwhile, the next block must not be found after the block's new content.
TEST(KvBlockPool, AChildNeverFollowsItsParentsLaterContent) {
  KvBlockPool pool(3);
  const std::vector<int32_t> a = Tokens(1, 4), b = Tokens(5, 4), other = Tokens(90, 4);
  const int32_t canonical = *pool.Allocate();  // sequence A's first block
  pool.Cache(canonical, kRoot, a);
  const int32_t mine = *pool.Allocate();  // sequence B computed the same tokens into its own block
  const Parent adopted = pool.AsParent(pool.Cache(mine, kRoot, a));
  EXPECT_EQ(adopted.block, canonical);
  const int32_t filler = *pool.Allocate();  // the pool is full: the next allocation evicts
  pool.Free(canonical);  // A ends; the pool reuses its idle cached block for other content
  const int32_t reused = *pool.Allocate();
  ASSERT_EQ(reused, canonical);
  pool.Cache(reused, kRoot, other);
  pool.Free(filler);
  const int32_t next = *pool.Allocate();  // B's second block, chained after what it adopted
  pool.Cache(next, adopted, b);
  EXPECT_FALSE(pool.Find(pool.AsParent(reused), b).has_value()) << "found after the parent's new content";
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

// Random allocations, frees, lookups and caching against a model of the references the test
// holds: after every operation no block is both free and referenced, the pool's counts equal the
// model's, and an allocation never hands out a block someone holds.
TEST(KvBlockPool, RandomizedStressKeepsTheInvariants) {
  std::mt19937 rng(20261203);
  KvBlockPool pool(24);
  std::map<int32_t, int> held;  // block -> references this test holds
  std::vector<std::pair<Parent, std::vector<int32_t>>> cached_as;  // (parent, tokens) it cached
  auto pick_held = [&]() -> int32_t {
    auto it = held.begin();
    std::advance(it, std::uniform_int_distribution<size_t>(0, held.size() - 1)(rng));
    return it->first;
  };
  for (int op = 0; op < 20000; ++op) {
    const int kind = std::uniform_int_distribution<int>(0, 3)(rng);
    if (kind == 0) {
      if (auto block = pool.Allocate()) {
        ASSERT_EQ(held.count(*block), 0u) << "op " << op << ": allocated block " << *block << " is held";
        held[*block] = 1;
      } else {
        ASSERT_EQ(pool.free_blocks(), 0);
      }
    } else if (kind == 1 && !held.empty()) {
      const int32_t block = pick_held();
      pool.Free(block);
      if (--held[block] == 0) held.erase(block);
    } else if (kind == 2 && !held.empty()) {
      // Cache a held block under a parent: a block the test holds, or none; few distinct tokens,
      // so that equal content recurs.
      const int32_t block = pick_held();
      const Parent parent = std::uniform_int_distribution<int>(0, 1)(rng) ? pool.AsParent(pick_held()) : kRoot;
      const std::vector<int32_t> tokens = Tokens(std::uniform_int_distribution<int>(0, 5)(rng), 4);
      if (pool.cached(block)) {
        ASSERT_EQ(pool.Cache(block, parent, tokens), block) << "op " << op << ": a cached block keeps its content";
        continue;
      }
      const int32_t canonical = pool.Cache(block, parent, tokens);
      ASSERT_EQ(pool.Find(parent, tokens), canonical);
      cached_as.emplace_back(parent, tokens);
    } else if (kind == 3 && !cached_as.empty()) {
      const auto& [parent, tokens] = cached_as[std::uniform_int_distribution<size_t>(0, cached_as.size() - 1)(rng)];
      if (parent != kRoot && !held.count(parent.block)) continue;  // a parent the test let go
      if (auto found = pool.Find(parent, tokens)) {
        pool.Acquire(*found);
        ++held[*found];
      }
    }
    Status ok = pool.CheckInvariants();
    ASSERT_TRUE(ok.ok()) << "op " << op << ": " << ok.ToString();
    int references = 0;
    for (int32_t block = 0; block < pool.total_blocks(); ++block) {
      const int expected = held.count(block) ? held.at(block) : 0;
      ASSERT_EQ(pool.references(block), expected) << "op " << op << ", block " << block;
      references += expected > 0 ? 1 : 0;
    }
    ASSERT_EQ(pool.free_blocks(), pool.total_blocks() - references) << "op " << op;
  }
  for (const auto& [block, count] : held) {
    for (int i = 0; i < count; ++i) pool.Free(block);
  }
  EXPECT_EQ(pool.free_blocks(), pool.total_blocks());  // every count back to zero
  for (int32_t block = 0; block < pool.total_blocks(); ++block) EXPECT_EQ(pool.references(block), 0);
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

std::unique_ptr<ScheduledSequence> Sequence(uint64_t id, std::vector<int32_t> prompt) {
  auto s = std::make_unique<ScheduledSequence>();
  s->id = id;
  s->prompt_length = prompt.size();
  s->tokens = std::move(prompt);
  return s;
}

// Runs `scheduler` until sequence `id` has sampled `outputs` tokens, as the serving loop would
// (computed advanced, blocks cached, a token sampled where logits were wanted); returns the
// start position of its first planned chunk.
int32_t RunUntilDone(Scheduler& scheduler, uint64_t id, size_t outputs, int64_t* step) {
  int32_t first_start = -1;
  for (;;) {
    ScheduleDecision d = scheduler.Schedule((*step)++);
    bool done = false;
    for (size_t i = 0; i < d.sequences.size(); ++i) {
      ScheduledSequence& s = *d.sequences[i];
      if (s.id == id && first_start < 0) first_start = d.plan.sequences[i].start_position;
      s.computed += d.plan.sequences[i].tokens.size();
      if (d.plan.sequences[i].want_logits) s.tokens.push_back(9000 + static_cast<int32_t>(s.generated()));
      scheduler.CacheComputedBlocks(s);
      done |= s.id == id && s.generated() >= outputs;
    }
    if (done) return first_start;
  }
}

TEST(SchedulerPrefixCache, SharedPromptsSkipTheirCachedBlocksAndAlwaysComputeTheLastToken) {
  KvBlockPool pool(64);
  Scheduler scheduler({.max_batch_size = 4, .max_batched_tokens = 64, .block_size = 4}, &pool);
  int64_t step = 0;
  std::vector<int32_t> system = Tokens(100, 10);  // two full blocks and half of a third
  auto with = [&](std::vector<int32_t> head, const std::vector<int32_t>& tail) {
    head.insert(head.end(), tail.begin(), tail.end());
    return head;
  };
  scheduler.Add(Sequence(1, with(system, Tokens(500, 3))));  // 13 tokens: nothing cached yet
  ScheduleDecision first = scheduler.Schedule(step);
  EXPECT_EQ(first.prefix_query_tokens, 13);
  EXPECT_EQ(first.prefix_hit_tokens, 0);
  step = 0;
  EXPECT_EQ(RunUntilDone(scheduler, 1, 3, &step), 0);
  // Partial hit: the system prompt's two full blocks (8 tokens); the third block differs.
  scheduler.Add(Sequence(2, with(system, Tokens(700, 5))));
  ScheduleDecision d = scheduler.Schedule(step);
  ASSERT_EQ(d.plan.sequences.size(), 2u);  // 1 decodes, 2 prefills from position 8
  EXPECT_EQ(d.plan.sequences[1].start_position, 8);
  EXPECT_EQ(d.plan.sequences[1].tokens.size(), 15u - 8u);
  EXPECT_EQ(d.prefix_query_tokens, 15);
  EXPECT_EQ(d.prefix_hit_tokens, 8);
  EXPECT_EQ(d.plan.sequences[1].block_table[0], d.plan.sequences[0].block_table[0]);  // shared
  std::unique_ptr<ScheduledSequence> two = scheduler.Remove(2);  // cancelled mid-prefill
  // Whole prompt but the last token: sequence 1's own 13-token prompt again finds 3 blocks (12
  // tokens) and computes the 13th; a 12-token prompt of three full blocks computes its third
  // block (its last token's logits sample).
  std::vector<int32_t> again = with(system, Tokens(500, 3));
  scheduler.Add(Sequence(3, again));
  d = scheduler.Schedule(step++);
  EXPECT_EQ(d.prefix_hit_tokens, 12);
  EXPECT_EQ(d.plan.sequences.back().start_position, 12);
  EXPECT_EQ(d.plan.sequences.back().tokens.size(), 1u);
  EXPECT_TRUE(d.plan.sequences.back().want_logits);
  again.pop_back();
  scheduler.Add(Sequence(4, again));
  d = scheduler.Schedule(step++);
  EXPECT_EQ(d.prefix_hit_tokens, 8);
  EXPECT_EQ(d.plan.sequences.back().start_position, 8);
  // Every sequence gone: every reference returns, the cached blocks stay (idle).
  for (uint64_t id : {1, 3, 4}) scheduler.Remove(id);
  EXPECT_EQ(pool.free_blocks(), pool.total_blocks());
  EXPECT_GT(pool.cached_blocks(), 0);
  for (int32_t block = 0; block < pool.total_blocks(); ++block) EXPECT_EQ(pool.references(block), 0);
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

TEST(SchedulerPrefixCache, OffLooksNothingUpAndCachesNothing) {
  KvBlockPool pool(64);
  Scheduler scheduler({.max_batch_size = 4, .max_batched_tokens = 64, .block_size = 4, .prefix_caching = false},
                      &pool);
  int64_t step = 0;
  scheduler.Add(Sequence(1, Tokens(100, 13)));
  RunUntilDone(scheduler, 1, 2, &step);
  scheduler.Add(Sequence(2, Tokens(100, 13)));
  ScheduleDecision d = scheduler.Schedule(step);
  EXPECT_EQ(d.prefix_query_tokens, 0);
  EXPECT_EQ(d.plan.sequences.back().start_position, 0);
  EXPECT_EQ(pool.cached_blocks(), 0);
}

TEST(SchedulerPrefixCache, APreemptedSequenceResumesFromItsOwnCachedBlocks) {
  KvBlockPool pool(6);  // 24 positions
  Scheduler scheduler({.max_batch_size = 4, .max_batched_tokens = 64, .block_size = 4}, &pool);
  int64_t step = 0;
  scheduler.Add(Sequence(1, Tokens(100, 9)));
  scheduler.Add(Sequence(2, Tokens(300, 9)));
  std::vector<uint64_t> preempted;
  int64_t hits = 0;
  for (int i = 0; i < 12 && preempted.empty(); ++i) {  // both grow until the pool runs out
    ScheduleDecision d = scheduler.Schedule(step++);
    preempted = d.preempted;
    for (size_t k = 0; k < d.sequences.size(); ++k) {
      d.sequences[k]->computed += d.plan.sequences[k].tokens.size();
      if (d.plan.sequences[k].want_logits) d.sequences[k]->tokens.push_back(7);
      scheduler.CacheComputedBlocks(*d.sequences[k]);
    }
  }
  ASSERT_EQ(preempted, std::vector<uint64_t>{2});
  scheduler.Remove(1);  // room again: 2 comes back and finds what it cached, if not evicted
  ScheduleDecision d = scheduler.Schedule(step++);
  hits += d.prefix_hit_tokens;
  ASSERT_EQ(d.plan.sequences.size(), 1u);
  EXPECT_EQ(d.plan.sequences[0].start_position, hits);
  EXPECT_GT(hits, 0);
  EXPECT_EQ(hits % 4, 0);
  scheduler.Remove(2);
  EXPECT_EQ(pool.free_blocks(), pool.total_blocks());
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

}  // namespace
}  // namespace tpserve
