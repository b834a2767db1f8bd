// Continuous (iteration-level) batching as a policy over plain data: every step, running
// sequences decode one token each, then waiting sequences are admitted and their prompts fed in
// chunks under a per-step token budget. KV blocks are taken as sequences grow; when they run
// out, the most recently admitted running sequence is preempted (its blocks freed, its tokens
// recomputed later: batch invariance makes the recomputed KV bitwise identical). With prefix
// caching, a sequence admitted with nothing computed first takes the longest run of cached full
// blocks that matches its tokens (always leaving its last token to compute, so that it samples),
// and every full block it computes is cached for the sequences after it.
// No threads, no gRPC, no engine: testable on its own.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "engine/step/kv_cache.h"
#include "engine/step/step_plan.h"

namespace tpserve {

struct SchedulerOptions {
  int max_batch_size = 32;       // running sequences
  int max_batched_tokens = 512;  // tokens per step, prompt chunks included
  int block_size = 16;
  bool prefix_caching = true;    // --prefix-caching on|off
};

// What the scheduler knows of one sequence.
struct ScheduledSequence {
  uint64_t id = 0;
  std::vector<int32_t> tokens;   // prompt followed by every generated token
  size_t prompt_length = 0;
  size_t computed = 0;           // leading tokens whose KV is in the cache
  std::vector<int32_t> blocks;   // KV blocks, in position order
  int preemptions = 0;
  KvBlockPool::PrefixChain cached;  // prefix caching: its leading blocks in the cache

  size_t generated() const { return tokens.size() - prompt_length; }
};

// One step's decision: the plan, and for each plan entry the sequence it belongs to.
struct ScheduleDecision {
  StepPlan plan;
  std::vector<ScheduledSequence*> sequences;  // parallel to plan.sequences
  std::vector<uint64_t> preempted;            // ids preempted while planning this step
  // Prefix caching, over the sequences admitted this step: their tokens looked up in the cache, and
  // those found there (whose KV this step does not compute).
  int64_t prefix_query_tokens = 0;
  int64_t prefix_hit_tokens = 0;
};

class Scheduler {
 public:
  Scheduler(const SchedulerOptions& options, KvBlockPool* pool) : options_(options), pool_(pool) {}

  // Queues a sequence (its tokens are the prompt).
  void Add(std::unique_ptr<ScheduledSequence> sequence);
  // Removes a sequence wherever it is and frees its blocks; returns it (nullptr if unknown).
  std::unique_ptr<ScheduledSequence> Remove(uint64_t id);

  ScheduleDecision Schedule(int64_t step_id);
  // Caches the full blocks of `s` whose KV is now computed (prefix caching; after each step).
  void CacheComputedBlocks(ScheduledSequence& s);

  int running() const { return static_cast<int>(running_.size()); }
  int waiting() const { return static_cast<int>(waiting_.size()); }
  // Waiting sequences that ran before and were preempted (the others have never started).
  int preempted_waiting() const;
  bool idle() const { return running_.empty() && waiting_.empty(); }

 private:
  // Makes sure `s` has blocks for `positions` tokens; false if the pool ran dry.
  bool Reserve(ScheduledSequence& s, size_t positions);
  // Prefix caching: takes the cached blocks that match the start of `s` (nothing computed yet);
  // returns the tokens found.
  size_t TakeCachedPrefix(ScheduledSequence& s);
  void Preempt(ScheduledSequence& s);
  void FreeBlocks(ScheduledSequence& s);

  SchedulerOptions options_;
  KvBlockPool* pool_;
  std::vector<std::unique_ptr<ScheduledSequence>> running_;  // in admission order
  std::deque<std::unique_ptr<ScheduledSequence>> waiting_;   // FIFO; preempted ones go first
};

}  // namespace tpserve
