#include "server/engine_loop.h"

#include <pthread.h>

#include <algorithm>

#include "text/tokenizer/incremental_decoder.h"

namespace tpserve {

using Clock = std::chrono::steady_clock;

namespace {

double Seconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// Length of the longest suffix of `text` that is a proper prefix of some stop string: text that
// must be held back because the next tokens could complete a stop string.
size_t HeldSuffix(const std::string& text, const std::vector<std::string>& stops) {
  size_t held = 0;
  for (const std::string& stop : stops) {
    for (size_t k = std::min(text.size(), stop.size() - 1); k > held; --k) {
      if (text.compare(text.size() - k, k, stop, 0, k) == 0) {
        held = k;
        break;
      }
    }
  }
  return held;
}

// The scheduler must cut KV blocks exactly as the engine stores them.
ServingOptions WithEngineBlockSize(ServingOptions options, const Engine& engine) {
  options.scheduler.block_size = engine.block_size();
  return options;
}

}  // namespace

std::string FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength: return "length";
    case FinishReason::kStop: return "stop";
    case FinishReason::kCancelled: return "cancelled";
  }
  return "?";
}

struct EngineLoop::Request {
  uint64_t id = 0;
  ServeRequest request;
  std::unique_ptr<IncrementalDecoder> decoder;
  std::string held_text;  // decoded text not yet sent (may start a stop string)
  std::vector<SampledToken> pending_tokens;
  int completion_tokens = 0;
  RequestTiming timing;
  Clock::time_point arrived, first_token, last_token;
  bool scheduled = false;  // has been in a step; until then it holds one of --max-queue's slots
};

EngineLoop::EngineLoop(Engine* engine, const Tokenizer* tokenizer, const EngineLoopOptions& options,
                       ServerMetrics* metrics)
    : engine_(engine),
      tokenizer_(tokenizer),
      options_(options),
      metrics_(metrics),
      core_(WithEngineBlockSize(options, *engine), &engine->block_pool()) {
  if (options_.max_model_len <= 0) options_.max_model_len = engine->config().max_position_embeddings;
  metrics_->kv_blocks_total = engine->block_pool().total_blocks();
  UpdateGauges();
}

EngineLoop::~EngineLoop() { Stop(); }

void EngineLoop::Start() {
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "tps-loop");
    Run();
  });
}

void EngineLoop::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

int EngineLoop::in_flight() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_flight_;
}

Result<uint64_t> EngineLoop::Submit(ServeRequest request) {
  if (Status fits = core_.CheckFits(request.prompt.size(), request.max_tokens); !fits.ok()) return fits;
  auto r = std::make_unique<Request>();
  r->arrived = Clock::now();
  r->decoder = std::make_unique<IncrementalDecoder>(*tokenizer_, /*skip_special=*/true);
  r->request = std::move(request);
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_ || !healthy_) return Status(StatusCode::kUnavailable, "the engine is not serving");
    // Counted here, under the lock, and released on the request's first step or its end: the
    // limit holds exactly however requests arrive between steps.
    if (Status room = core_.CheckQueue(queued_); !room.ok()) {
      ++metrics_->queue_full_rejections;
      return room;
    }
    id = next_id_++;
    r->id = id;
    inbox_.push_back(std::move(r));
    ++in_flight_;
    ++queued_;
    metrics_->requests_waiting = queued_ + preempted_waiting_;
  }
  wake_.notify_one();
  return id;
}

void EngineLoop::Cancel(uint64_t id) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    cancels_.insert(id);
  }
  wake_.notify_one();
}

void EngineLoop::Run() {
  while (true) {
    std::vector<std::unique_ptr<Request>> arrivals;
    std::unordered_set<uint64_t> cancels;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      const bool woken = wake_.wait_for(lock, kHeartbeatInterval, [&] {
        return stop_ || !inbox_.empty() || !cancels_.empty() || !core_.idle();
      });
      if (stop_) break;
      if (!woken) {
        // Idle: a multi-process leader checks that its followers are still there, so that a dead
        // one fails the server now rather than the next request.
        lock.unlock();
        if (healthy_) {
          Status alive = engine_->Heartbeat();
          if (!alive.ok()) FailAll(Status(StatusCode::kUnavailable, "engine heartbeat failed: " + alive.message()));
        }
        continue;
      }
      // An idle engine waits briefly for more requests, so they start as one batch.
      if (core_.idle() && core_.BatchWaitSeconds() > 0) {
        wake_.wait_for(lock, std::chrono::duration<double>(core_.BatchWaitSeconds()), [&] {
          return stop_ || core_.BatchIsFull(static_cast<int>(inbox_.size()));
        });
        if (stop_) break;
      }
      arrivals.swap(inbox_);
      cancels.swap(cancels_);
    }
    Admit(std::move(arrivals));
    ApplyCancellations(cancels);
    if (!core_.idle()) Step();
    UpdateGauges();
  }
  // Shutting down: everything still here is cancelled.
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& r : inbox_) requests_.emplace(r->id, std::move(r));
    inbox_.clear();
  }
  std::vector<uint64_t> ids;
  for (auto& [id, r] : requests_) ids.push_back(id);
  for (uint64_t id : ids) Finish(id, FinishReason::kCancelled);
}

void EngineLoop::Admit(std::vector<std::unique_ptr<Request>> arrivals) {
  for (auto& r : arrivals) {
    core_.Add(r->id, r->request.prompt);
    requests_.emplace(r->id, std::move(r));
  }
}

void EngineLoop::ApplyCancellations(const std::unordered_set<uint64_t>& cancels) {
  for (uint64_t id : cancels) {
    if (requests_.count(id)) Finish(id, FinishReason::kCancelled);
  }
}

void EngineLoop::Step() {
  ScheduleDecision decision = core_.PlanStep();
  metrics_->preemptions += decision.preempted.size();
  metrics_->prefix_cache_queries += static_cast<uint64_t>(decision.prefix_query_tokens);
  metrics_->prefix_cache_hits += static_cast<uint64_t>(decision.prefix_hit_tokens);
  if (decision.plan.sequences.empty()) return;
  if (plan_observer_) plan_observer_(decision.plan);
  const auto now = Clock::now();
  int started = 0;
  for (size_t k = 0; k < decision.sequences.size(); ++k) {
    Request& r = *requests_.at(decision.sequences[k]->id);
    // The engine samples: how, and which of the request's draws this is.
    decision.plan.sequences[k].sampling = r.request.sampling;
    decision.plan.sequences[k].sampled_tokens = r.completion_tokens;
    if (!r.scheduled) {
      r.scheduled = true;
      ++started;
      r.timing.queue_s = Seconds(r.arrived, now);
      metrics_->request_queue_time.Observe(r.timing.queue_s);
    }
  }
  if (started > 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    queued_ -= started;
  }
  auto result = engine_->Step(decision.plan);
  if (!result.ok()) {
    FailAll(Status(StatusCode::kUnavailable, "engine step failed: " + result.status().message()));
    return;
  }
  const StepTrace& trace = result->trace;
  const RankTrace& slowest = trace.ranks[trace.SlowestRank()];
  const double compute_s = slowest.ComputeNs() * 1e-9, comm_s = slowest.CommNs() * 1e-9;
  metrics_->steps++;
  if (trace.per_op) {  // steps without per-op timing (--trace-every) know only their totals
    metrics_->step_compute.Observe(compute_s);
    metrics_->step_comm.Observe(comm_s);
  }
  metrics_->step_host.Observe(trace.HostNs() * 1e-9);
  uint64_t seen = metrics_->max_batch_seen.load();
  while (static_cast<uint64_t>(trace.batch_size) > seen &&
         !metrics_->max_batch_seen.compare_exchange_weak(seen, trace.batch_size)) {
  }
  for (const OpRecord& op : slowest.ops) {
    if (op.op == OpKind::kAllReduceAttn || op.op == OpKind::kAllReduceMlp) {
      metrics_->ObserveAllReduce(op.bytes, op.duration_ns * 1e-9);
    }
  }

  const std::vector<SampledToken>& tokens = result->tokens;  // [sequences with want_logits], plan order
  metrics_->generation_tokens += tokens.size();
  // Each sequence's share of the step, by its tokens in it; and the prompt work (tokens fed before
  // the sequence's first sample; recomputation after a preemption counts too: it is computed again).
  const double tokens_in_step = std::max(1, decision.plan.token_count());
  for (size_t k = 0; k < decision.sequences.size(); ++k) {
    const SequencePlan& p = decision.plan.sequences[k];
    Request& r = *requests_.at(static_cast<uint64_t>(p.sequence_id));
    const double share = p.tokens.size() / tokens_in_step;
    r.timing.compute_s += compute_s * share;
    r.timing.comm_s += comm_s * share;
    if (p.start_position < static_cast<int32_t>(decision.sequences[k]->prompt_length)) {
      metrics_->prompt_tokens += p.tokens.size();
    }
  }
  std::vector<int32_t> ids;
  ids.reserve(tokens.size());
  for (const SampledToken& token : tokens) ids.push_back(token.id);
  core_.CommitStep(decision, ids);
  // Then each new token, in plan order. A request that finishes here frees its sequence, so only
  // the plan (never decision.sequences) is read from now on.
  size_t row = 0;
  for (const SequencePlan& p : decision.plan.sequences) {
    if (!p.want_logits) continue;
    ProcessToken(*requests_.at(static_cast<uint64_t>(p.sequence_id)), tokens[row++]);
  }
}

void EngineLoop::ProcessToken(Request& r, const SampledToken& token) {
  const auto now = Clock::now();
  if (r.completion_tokens == 0) {
    r.first_token = now;
    r.timing.time_to_first_token_s = Seconds(r.arrived, now);
    metrics_->time_to_first_token.Observe(r.timing.time_to_first_token_s);
  } else {
    metrics_->inter_token_latency.Observe(Seconds(r.last_token, now));
  }
  r.last_token = now;
  ++r.completion_tokens;
  const bool stop_token = IsStopToken(r.request.sampling, engine_->config().eos_token_ids, token.id);

  auto piece = r.decoder->Push(token.id);
  r.held_text += piece.ok() ? *piece : std::string();
  r.pending_tokens.push_back(token);

  // Stop strings: cut the text before the earliest match of any of them and finish.
  size_t cut = std::string::npos;
  for (const std::string& stop : r.request.stop) cut = std::min(cut, r.held_text.find(stop));
  if (cut != std::string::npos) {
    r.held_text.resize(cut);
    r.request.sink->OnDelta(std::move(r.held_text), std::move(r.pending_tokens));
    r.held_text.clear();
    r.pending_tokens.clear();
    Finish(r.id, FinishReason::kStop);
    return;
  }
  const bool last = stop_token || r.completion_tokens >= r.request.max_tokens;
  if (last) r.held_text += r.decoder->Finish();
  const size_t hold = last ? 0 : HeldSuffix(r.held_text, r.request.stop);
  if (r.held_text.size() > hold || last) {
    std::string text = r.held_text.substr(0, r.held_text.size() - hold);
    r.held_text.erase(0, r.held_text.size() - hold);
    r.request.sink->OnDelta(std::move(text), std::move(r.pending_tokens));
    r.pending_tokens.clear();
  }
  if (last) Finish(r.id, stop_token ? FinishReason::kStop : FinishReason::kLength);
}

void EngineLoop::Finish(uint64_t id, FinishReason reason) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  std::unique_ptr<Request> r = std::move(it->second);
  requests_.erase(it);
  std::unique_ptr<ScheduledSequence> sequence = core_.Remove(id);
  const auto now = Clock::now();
  r->timing.e2e_s = Seconds(r->arrived, now);
  if (r->completion_tokens > 0) r->timing.decode_s = Seconds(r->first_token, r->last_token);
  if (sequence) r->timing.preemptions = sequence->preemptions;
  metrics_->e2e_request_latency.Observe(r->timing.e2e_s);
  if (r->completion_tokens > 1) {
    metrics_->request_time_per_output_token.Observe(r->timing.decode_s / (r->completion_tokens - 1));
  }
  metrics_->CountFinished(FinishReasonName(reason));
  // Gauges first: a client that sees its stream end and then asks for Stats finds its KV blocks
  // already counted free (they were released by Remove above).
  UpdateGauges();
  r->request.sink->OnFinish(reason, static_cast<int>(r->request.prompt.size()), r->completion_tokens,
                            r->timing);
  Release(*r);
}

void EngineLoop::Release(const Request& r) {
  std::lock_guard<std::mutex> lock(mutex_);
  --in_flight_;
  if (!r.scheduled) --queued_;  // cancelled, timed out or failed before its first step
}

void EngineLoop::FailAll(const Status& status) {
  {
    // Requests submitted while the failing step ran fail too, rather than run on a broken engine.
    std::lock_guard<std::mutex> lock(mutex_);
    healthy_ = false;
    metrics_->engine_healthy = 0;
    for (auto& r : inbox_) requests_.emplace(r->id, std::move(r));
    inbox_.clear();
  }
  std::vector<uint64_t> ids;
  for (auto& [id, r] : requests_) ids.push_back(id);
  for (uint64_t id : ids) {
    std::unique_ptr<Request> r = std::move(requests_.at(id));
    requests_.erase(id);
    core_.Remove(id);
    metrics_->CountError(std::string(StatusCodeName(status.code())));
    r->request.sink->OnError(status);
    Release(*r);
  }
}

void EngineLoop::UpdateGauges() {
  metrics_->requests_running = core_.scheduler().running();
  {
    // Waiting = not yet started (what --max-queue bounds) + preempted, waiting to resume.
    const int preempted = core_.scheduler().preempted_waiting();
    std::lock_guard<std::mutex> lock(mutex_);
    preempted_waiting_ = preempted;
    metrics_->requests_waiting = queued_ + preempted_waiting_;
  }
  const KvBlockPool& pool = engine_->block_pool();
  metrics_->kv_blocks_free = pool.free_blocks();
  metrics_->kv_blocks_cached = pool.cached_blocks();
  metrics_->kv_cache_usage =
      pool.total_blocks() ? 1.0 - static_cast<double>(pool.free_blocks()) / pool.total_blocks() : 0.0;
}

}  // namespace tpserve
