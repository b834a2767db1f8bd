#include "engine/step/serving_core.h"

#include <algorithm>
#include <string>

namespace tpserve {

ServingCore::ServingCore(const ServingOptions& options, KvBlockPool* pool)
    : options_(options), pool_(pool), scheduler_(options.scheduler, pool) {}

Status ServingCore::CheckFits(size_t prompt_tokens, int max_tokens) const {
  const size_t positions = prompt_tokens + static_cast<size_t>(std::max(max_tokens, 0));
  const size_t block_size = static_cast<size_t>(options_.scheduler.block_size);
  const size_t blocks = (positions + block_size - 1) / block_size;
  if (blocks > static_cast<size_t>(pool_->total_blocks())) {
    return Status(StatusCode::kResourceExhausted,
                  "prompt + max_tokens = " + std::to_string(positions) + " positions need " +
                      std::to_string(blocks) + " KV blocks but the cache has " +
                      std::to_string(pool_->total_blocks()));
  }
  return Status::Ok();
}

Status ServingCore::CheckQueue(int queued) const {
  if (queued >= options_.max_queue) {
    return Status(StatusCode::kResourceExhausted,
                  "request queue is full (" + std::to_string(options_.max_queue) + " waiting)");
  }
  return Status::Ok();
}

void ServingCore::Add(uint64_t id, std::vector<int32_t> prompt) {
  auto sequence = std::make_unique<ScheduledSequence>();
  sequence->id = id;
  sequence->prompt_length = prompt.size();
  sequence->tokens = std::move(prompt);
  scheduler_.Add(std::move(sequence));
}

std::unique_ptr<ScheduledSequence> ServingCore::Remove(uint64_t id) {
  return scheduler_.Remove(id);
}

ScheduleDecision ServingCore::PlanStep() {
  return scheduler_.Schedule(next_step_id_++);
}

void ServingCore::CommitStep(const ScheduleDecision& decision,
                             const std::vector<int32_t>& sampled) {
  size_t row = 0;
  for (size_t k = 0; k < decision.sequences.size(); ++k) {
    ScheduledSequence& s = *decision.sequences[k];
    const SequencePlan& p = decision.plan.sequences[k];
    s.computed += p.tokens.size();
    if (p.want_logits && row < sampled.size()) s.tokens.push_back(sampled[row++]);
    scheduler_.CacheComputedBlocks(s);
  }
}

}  // namespace tpserve
