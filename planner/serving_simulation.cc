#include "planner/serving_simulation.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tpserve {
namespace {

// Mirrors EngineLoop::Run on a simulated clock: the same ServingCore calls in the same order.
class Simulation {
 public:
  Simulation(const std::vector<SimulatedRequest>& requests, const ServingOptions& options,
             int kv_blocks, const StepSeconds& step_seconds, int concurrency)
      : requests_(requests),
        pool_(kv_blocks),
        core_(options, &pool_),
        step_seconds_(step_seconds),
        state_(requests.size()),
        arrival_s_(requests.size()) {
    result_.records.resize(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      if (concurrency <= 0) {
        arrival_s_[i] = requests[i].arrival_s;
      } else {  // closed loop: the first `concurrency` at once, each later one when one ends
        arrival_s_[i] = i < static_cast<size_t>(concurrency) ? 0 : kNotYet;
      }
    }
    released_ = concurrency <= 0 ? requests.size() : std::min<size_t>(concurrency, requests.size());
  }

  SimulationResult Run() {
    while (true) {
      if (inbox_.empty() && core_.idle()) {
        if (next_ == requests_.size() || arrival_s_[next_] == kNotYet) break;
        now_ = std::max(now_, arrival_s_[next_]);  // idle until the next arrival
      }
      ReceiveUntil(now_);
      if (inbox_.empty() && core_.idle()) continue;  // everything that arrived was refused
      if (core_.idle() && core_.BatchWaitSeconds() > 0) WaitForBatch();
      for (size_t index : inbox_) {
        const SimulatedRequest& r = requests_[index];
        core_.Add(index + 1, r.prompt ? *r.prompt : SimulatedPrompt(r.prompt_tokens, index));
      }
      inbox_.clear();
      RunStep();
    }
    result_.duration_s = now_;
    return std::move(result_);
  }

 private:
  static constexpr double kNotYet = std::numeric_limits<double>::infinity();

  struct RequestState {
    bool started = false;  // has been in a step (until then it holds a queue slot)
    int generated = 0;
    double last_token_s = 0;
  };

  // Every request that has arrived by `t` is submitted: refused, or put in the inbox.
  void ReceiveUntil(double t) {
    while (next_ < requests_.size() && arrival_s_[next_] <= t) Submit(next_++);
  }

  // Closed loop: a request ended (completed or refused), so its client sends the next one now.
  void Ended() {
    if (released_ < requests_.size()) arrival_s_[released_++] = now_;
  }

  void Submit(size_t index) {
    const SimulatedRequest& request = requests_[index];
    Status admitted = core_.CheckFits(request.prompt_tokens, request.output_tokens);
    if (admitted.ok()) admitted = core_.CheckQueue(queued_);
    if (!admitted.ok()) {
      result_.records[index].error_code = "RESOURCE_EXHAUSTED";
      Ended();
      return;
    }
    inbox_.push_back(index);
    ++queued_;
  }

  // An idle engine holds its first step until the batch is full or the wait is over.
  void WaitForBatch() {
    const double deadline = now_ + core_.BatchWaitSeconds();
    while (!core_.BatchIsFull(static_cast<int>(inbox_.size())) && next_ < requests_.size() &&
           arrival_s_[next_] <= deadline) {
      now_ = std::max(now_, arrival_s_[next_]);
      Submit(next_++);
    }
    if (!core_.BatchIsFull(static_cast<int>(inbox_.size()))) now_ = deadline;
  }

  void RunStep() {
    ScheduleDecision decision = core_.PlanStep();
    SimulatedStep step{.start_s = now_, .preempted = static_cast<int>(decision.preempted.size())};
    for (size_t k = 0; k < decision.sequences.size(); ++k) {
      const ScheduledSequence& s = *decision.sequences[k];
      const SequencePlan& p = decision.plan.sequences[k];
      RequestState& state = state_[s.id - 1];
      if (!state.started) {
        state.started = true;
        --queued_;
      }
      const int fed = static_cast<int>(p.tokens.size());
      step.tokens += fed;
      // Decode feeds a sequence's newest token; anything else is prompt work (a prefill chunk,
      // or a preempted sequence's recomputation).
      const bool decode = fed == 1 && s.generated() > 0 && s.computed + 1 == s.tokens.size();
      if (!decode) step.prompt_tokens += fed;
    }
    step.sequences = static_cast<int>(decision.sequences.size());
    step.seconds = decision.plan.sequences.empty() ? 0 : step_seconds_(decision);
    now_ += step.seconds;
    result_.steps.push_back(step);

    std::vector<int32_t> sampled;
    for (const SequencePlan& p : decision.plan.sequences) {
      if (p.want_logits) sampled.push_back(0);
    }
    core_.CommitStep(decision, sampled);
    for (const SequencePlan& p : decision.plan.sequences) {
      if (p.want_logits) Token(static_cast<size_t>(p.sequence_id) - 1);
    }
  }

  void Token(size_t index) {
    RequestState& state = state_[index];
    RequestRecord& record = result_.records[index];
    const double arrival = arrival_s_[index];
    if (state.generated == 0) {
      record.ttft_s = now_ - arrival;
    } else {
      record.itl_s.push_back(now_ - state.last_token_s);
    }
    state.last_token_s = now_;
    ++state.generated;
    if (state.generated < requests_[index].output_tokens) return;
    record.ok = true;
    record.e2e_s = now_ - arrival;
    record.output_tokens = state.generated;
    core_.Remove(index + 1);
    Ended();
  }

  const std::vector<SimulatedRequest>& requests_;
  KvBlockPool pool_;
  ServingCore core_;
  const StepSeconds& step_seconds_;
  std::vector<RequestState> state_;
  std::vector<double> arrival_s_;  // when each request is sent (kNotYet: closed loop, not yet)
  size_t released_ = 0;            // requests whose arrival time is known
  SimulationResult result_;
  double now_ = 0;
  size_t next_ = 0;            // the next request to arrive
  std::vector<size_t> inbox_;  // arrived and accepted, not yet given to the core
  int queued_ = 0;             // accepted and not yet in a step
};

}  // namespace

std::vector<int32_t> SimulatedPrompt(int tokens, size_t index) {
  // Only equality matters to the scheduler: token i of request k is k × an odd constant + i (mod
  // 2^31), so two requests' first blocks never agree and no block is shared.
  std::vector<int32_t> prompt(tokens);
  for (int i = 0; i < tokens; ++i) {
    prompt[i] = static_cast<int32_t>((index * 1000003u + static_cast<uint64_t>(i)) & 0x7fffffff);
  }
  return prompt;
}

planner::StepShape ShapeOfStep(const StepPlan& plan, int tp, int weight_bytes, int attention_query_tile) {
  planner::StepShape shape{.tp = tp,
                           .tokens = 0,
                           .logit_rows = 0,
                           .attention_positions = 0,
                           .weight_bytes = weight_bytes,
                           .attention_read_positions = 0};
  const double tile = std::max(1, attention_query_tile);
  for (const SequencePlan& p : plan.sequences) {
    const double fed = static_cast<double>(p.tokens.size()), start = p.start_position;
    shape.tokens += static_cast<int>(p.tokens.size());
    shape.logit_rows += p.want_logits ? 1 : 0;
    shape.attention_positions +=
        fed * start + fed * (fed + 1) / 2;  // positions start+1 .. start+fed
    // Tile k of n reads the positions up to its last query: start + min(k·tile, fed).
    const double tiles = std::ceil(fed / tile);
    shape.attention_read_positions += tiles * start + tile * (tiles - 1) * tiles / 2 + fed;
  }
  return shape;
}

planner::StepShape PromptStepShape(int tokens, int tp, int weight_bytes, int attention_query_tile) {
  StepPlan plan;
  plan.sequences.push_back({.tokens = std::vector<int32_t>(tokens), .want_logits = true});
  return ShapeOfStep(plan, tp, weight_bytes, attention_query_tile);
}

Result<SimulationResult> SimulateServing(const std::vector<SimulatedRequest>& requests,
                                         const ServingOptions& options, int kv_blocks,
                                         const StepSeconds& step_seconds, int concurrency) {
  if (kv_blocks < 1) return InvalidArgument("simulate: the KV cache needs at least one block");
  if (options.scheduler.block_size < 1 || options.scheduler.max_batch_size < 1 ||
      options.scheduler.max_batched_tokens < 1) {
    return InvalidArgument(
        "simulate: block size, max batch size and max batched tokens must be positive");
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    if (requests[i].prompt && requests[i].prompt->size() != static_cast<size_t>(requests[i].prompt_tokens)) {
      return InvalidArgument("simulate: request " + std::to_string(i) + " has " +
                             std::to_string(requests[i].prompt->size()) + " prompt ids for " +
                             std::to_string(requests[i].prompt_tokens) + " prompt tokens");
    }
    if (requests[i].prompt_tokens < 1 || requests[i].output_tokens < 1) {
      return InvalidArgument("simulate: request " + std::to_string(i) +
                             " needs at least one prompt and one output token");
    }
    if (concurrency <= 0 && i > 0 && requests[i].arrival_s < requests[i - 1].arrival_s) {
      return InvalidArgument("simulate: request " + std::to_string(i) +
                             " arrives before the one before it");
    }
  }
  return Simulation(requests, options, kv_blocks, step_seconds, concurrency).Run();
}

}  // namespace tpserve
