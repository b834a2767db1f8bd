// The thread that drives the engine for the server: takes submitted requests, lets the
// Scheduler build each step, runs it, samples, detokenizes (UTF-8 safe, stop strings held back
// until they can no longer match), and hands each request's new text to its sink. gRPC threads
// only ever touch the inbox and the cancel list, under one short lock.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/status.h"
#include "engine/engine.h"
#include "engine/step/sampler.h"
#include "text/tokenizer/tokenizer.h"
#include "server/metrics.h"
#include "engine/step/serving_core.h"

namespace tpserve {

enum class FinishReason { kLength, kStop, kCancelled };
std::string FinishReasonName(FinishReason reason);

struct RequestTiming {
  double queue_s = 0;
  double time_to_first_token_s = 0;
  double decode_s = 0;
  double e2e_s = 0;
  double compute_s = 0;  // this request's share of the steps it was in
  double comm_s = 0;
  int preemptions = 0;
};

// Where a request's output goes. Called from the engine thread only, in order:
// any number of OnDelta, then exactly one of OnFinish / OnError.
class GenerationSink {
 public:
  virtual ~GenerationSink() = default;
  virtual void OnDelta(std::string text, std::vector<SampledToken> tokens) = 0;
  virtual void OnFinish(FinishReason reason, int prompt_tokens, int completion_tokens,
                        const RequestTiming& timing) = 0;
  virtual void OnError(Status status) = 0;
};

struct ServeRequest {
  std::string request_id;
  std::vector<int32_t> prompt;
  int max_tokens = 16;
  SamplingParams sampling;
  std::vector<std::string> stop;  // stop strings
  std::shared_ptr<GenerationSink> sink;
};

// The loop's rules (queue bound, batching wait, scheduler limits) are ServingCore's.
using EngineLoopOptions = ServingOptions;

class EngineLoop {
 public:
  // How often an idle loop calls Engine::Heartbeat.
  static constexpr std::chrono::milliseconds kHeartbeatInterval{1000};

  EngineLoop(Engine* engine, const Tokenizer* tokenizer, const EngineLoopOptions& options,
             ServerMetrics* metrics);
  ~EngineLoop();

  // Queues a request; RESOURCE_EXHAUSTED when the queue is full or the KV cache could never hold
  // it. Returns the id to cancel it with.
  Result<uint64_t> Submit(ServeRequest request);
  void Cancel(uint64_t id);  // takes effect before the next step

  // Called on the engine thread with each step's plan before the engine runs it (tests compare
  // the server's decisions with the serving simulation's). Set it before Start.
  void ObservePlans(std::function<void(const StepPlan&)> observer) { plan_observer_ = std::move(observer); }

  void Start();
  void Stop();  // cancels everything still queued or running, joins the thread
  bool healthy() const { return healthy_; }
  int in_flight() const;

 private:
  struct Request;
  void Run();
  void Admit(std::vector<std::unique_ptr<Request>> arrivals);
  void ApplyCancellations(const std::unordered_set<uint64_t>& cancels);
  void Step();
  void ProcessToken(Request& r, const SampledToken& token);
  void Finish(uint64_t id, FinishReason reason);
  void FailAll(const Status& status);
  void Release(const Request& r);  // gives back its in-flight count and, if never started, its queue slot
  void UpdateGauges();

  Engine* engine_;
  const Tokenizer* tokenizer_;
  EngineLoopOptions options_;
  ServerMetrics* metrics_;
  ServingCore core_;  // engine thread only, but for its const checks
  std::function<void(const StepPlan&)> plan_observer_;
  std::unordered_map<uint64_t, std::unique_ptr<Request>> requests_;  // engine thread only

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::unique_ptr<Request>> inbox_;
  std::unordered_set<uint64_t> cancels_;
  int in_flight_ = 0;  // submitted and not yet finished
  int queued_ = 0;     // submitted and not yet in a step: at most options_.max_queue
  int preempted_waiting_ = 0;  // as of the last step
  uint64_t next_id_ = 1;
  bool stop_ = false;
  std::atomic<bool> healthy_{true};
  std::thread thread_;
};

}  // namespace tpserve
