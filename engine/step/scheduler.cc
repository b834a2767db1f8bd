#include "engine/step/scheduler.h"

#include <algorithm>

namespace tpserve {

void Scheduler::Add(std::unique_ptr<ScheduledSequence> sequence) {
  waiting_.push_back(std::move(sequence));
}

std::unique_ptr<ScheduledSequence> Scheduler::Remove(uint64_t id) {
  auto take = [&](auto& container) -> std::unique_ptr<ScheduledSequence> {
    auto it = std::find_if(container.begin(), container.end(), [&](auto& s) { return s->id == id; });
    if (it == container.end()) return nullptr;
    std::unique_ptr<ScheduledSequence> s = std::move(*it);
    container.erase(it);
    FreeBlocks(*s);
    return s;
  };
  if (auto s = take(running_)) return s;
  return take(waiting_);
}

void Scheduler::FreeBlocks(ScheduledSequence& s) {
  // Last block first: the pool evicts idle cached blocks least recently freed first, so a
  // sequence's tail goes before its head, and the prefix others share stays longest.
  for (auto block = s.blocks.rbegin(); block != s.blocks.rend(); ++block) pool_->Free(*block);
  s.blocks.clear();
  s.cached = {};
}

size_t Scheduler::TakeCachedPrefix(ScheduledSequence& s) {
  // Full blocks only, and never the last token: its logits sample the next one.
  const size_t limit = (s.tokens.size() - 1) / static_cast<size_t>(options_.block_size);
  pool_->TakeCachedBlocks(s.tokens, options_.block_size, limit, &s.cached, &s.blocks);
  s.computed = s.blocks.size() * static_cast<size_t>(options_.block_size);
  return s.computed;
}

void Scheduler::CacheComputedBlocks(ScheduledSequence& s) {
  if (options_.prefix_caching) pool_->CacheFilledBlocks(s.tokens, s.blocks, s.computed, options_.block_size, &s.cached);
}

bool Scheduler::Reserve(ScheduledSequence& s, size_t positions) {
  const size_t needed = (positions + options_.block_size - 1) / options_.block_size;
  while (s.blocks.size() < needed) {
    auto block = pool_->Allocate();
    if (!block) return false;
    s.blocks.push_back(*block);
  }
  return true;
}

int Scheduler::preempted_waiting() const {
  return static_cast<int>(std::count_if(waiting_.begin(), waiting_.end(),
                                        [](const auto& s) { return s->preemptions > 0; }));
}

void Scheduler::Preempt(ScheduledSequence& s) {
  FreeBlocks(s);
  s.computed = 0;  // recompute prompt and generated tokens when readmitted
  ++s.preemptions;
}

ScheduleDecision Scheduler::Schedule(int64_t step_id) {
  ScheduleDecision decision;
  decision.plan.step_id = step_id;
  int budget = options_.max_batched_tokens;

  // 1. Running sequences: finish their prefill or decode one token, oldest first. When blocks run
  //    out, preempt the newest running sequence (possibly the one asking) and retry.
  std::vector<std::pair<ScheduledSequence*, size_t>> planned;  // sequence, tokens this step
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    ScheduledSequence& s = *running_[i];
    const size_t chunk = std::min<size_t>(budget, s.tokens.size() - s.computed);
    if (!Reserve(s, s.computed + chunk)) {
      ScheduledSequence& victim = *running_.back();
      Preempt(victim);
      decision.preempted.push_back(victim.id);
      waiting_.push_front(std::move(running_.back()));
      running_.pop_back();
      continue;  // retry i (unless it was the victim)
    }
    planned.emplace_back(&s, chunk);
    budget -= static_cast<int>(chunk);
    ++i;
  }
  // Sequences planned before a preemption may have been the victim: keep only running ones.
  std::erase_if(planned, [&](const auto& entry) {
    return std::none_of(running_.begin(), running_.end(),
                        [&](auto& r) { return r.get() == entry.first; });
  });

  // 2. Admit waiting sequences while there is room in the batch, the budget and the pool.
  while (!waiting_.empty() && budget > 0 &&
         static_cast<int>(running_.size()) < options_.max_batch_size) {
    ScheduledSequence& s = *waiting_.front();
    const size_t hits = options_.prefix_caching && s.computed == 0 ? TakeCachedPrefix(s) : 0;
    const size_t chunk = std::min<size_t>(budget, s.tokens.size() - s.computed);
    if (!Reserve(s, s.computed + chunk)) {
      FreeBlocks(s);  // wait until blocks are freed; never preempt for a newcomer
      s.computed = 0;  // any cached prefix is looked up again then
      break;
    }
    planned.emplace_back(&s, chunk);
    budget -= static_cast<int>(chunk);
    if (options_.prefix_caching) {
      decision.prefix_query_tokens += static_cast<int64_t>(s.tokens.size());
      decision.prefix_hit_tokens += static_cast<int64_t>(hits);
    }
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }

  for (auto [s, chunk] : planned) {
    SequencePlan p;
    p.sequence_id = static_cast<int64_t>(s->id);
    p.start_position = static_cast<int32_t>(s->computed);
    p.tokens.assign(s->tokens.begin() + s->computed, s->tokens.begin() + s->computed + chunk);
    p.block_table = s->blocks;
    p.want_logits = s->computed + chunk == s->tokens.size();
    decision.plan.sequences.push_back(std::move(p));
    decision.sequences.push_back(s);
  }
  return decision;
}

}  // namespace tpserve
