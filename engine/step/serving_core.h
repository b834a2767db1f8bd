// The serving loop's rules, without threads, clocks or an engine: which requests are taken (the
// KV cache must be able to hold each; the queue of requests not yet started is bounded), when an
// idle engine starts a step (once a batch is full, else after --max-wait-us), what each step runs
// (the Scheduler: continuous batching, chunked prefill, preemption) and what a step's results do
// to each sequence. The server's EngineLoop drives it with the wall clock and the engine;
// `tpserve plan simulate` drives the same code with a simulated clock and the step model, so the
// simulation makes the server's decisions rather than a copy of them.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "engine/step/kv_cache.h"
#include "engine/step/scheduler.h"

namespace tpserve {

struct ServingOptions {
  SchedulerOptions scheduler;
  int max_queue = 256;     // requests not yet started before RESOURCE_EXHAUSTED
  int max_wait_us = 1000;  // an idle engine waits this long for more requests to batch
  int max_model_len = 0;   // prompt + max_tokens limit (0: the model's)
};

class ServingCore {
 public:
  // `options.scheduler.block_size` must be the pool's block size.
  ServingCore(const ServingOptions& options, KvBlockPool* pool);

  // RESOURCE_EXHAUSTED when prompt + max_tokens positions could never fit in the KV cache.
  Status CheckFits(size_t prompt_tokens, int max_tokens) const;
  // RESOURCE_EXHAUSTED when `queued` requests (submitted, not yet in a step) already wait.
  Status CheckQueue(int queued) const;

  // An idle engine that has `arrivals` requests waits for more before its first step: until
  // BatchIsFull(arrivals), for at most BatchWaitSeconds().
  bool BatchIsFull(int arrivals) const { return arrivals >= options_.scheduler.max_batch_size; }
  double BatchWaitSeconds() const { return options_.max_wait_us * 1e-6; }

  // Queues a request (its prompt); it joins a step when the scheduler admits it.
  void Add(uint64_t id, std::vector<int32_t> prompt);
  // Removes a request wherever it is and frees its KV blocks (nullptr if unknown).
  std::unique_ptr<ScheduledSequence> Remove(uint64_t id);

  // The next step: its plan, and the sequence behind each plan entry. Step ids count from 0.
  ScheduleDecision PlanStep();
  // Records a step's results: every planned sequence's tokens are now in the cache, and each
  // entry that wanted logits gets its next token, `sampled` in plan order.
  void CommitStep(const ScheduleDecision& decision, const std::vector<int32_t>& sampled);

  const ServingOptions& options() const { return options_; }
  const Scheduler& scheduler() const { return scheduler_; }
  bool idle() const { return scheduler_.idle(); }

 private:
  ServingOptions options_;
  const KvBlockPool* pool_;
  Scheduler scheduler_;
  int64_t next_step_id_ = 0;
};

}  // namespace tpserve
