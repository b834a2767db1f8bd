// What loadgen's workload and statistics see of a server, whatever protocol it speaks: a target
// takes one request, streams its response and returns a RequestRecord. The protocols (gRPC,
// OpenAI-compatible HTTP) differ only in how they send and read; StreamTimer turns the arrivals
// they observe into the record the same way for both.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "clients/load_stats.h"

namespace tpserve {

// How long one request may take, send to last token, before it counts as failed.
inline constexpr double kLoadRequestTimeoutS = 600;

// How every request of a load test asks to be sampled: greedy unless a temperature is given.
// Servers pay for sampling per row (a 128k-id row's top-p took 18 ms in tpserve before session 29:
// docs/PERFORMANCE.md), so a load test measures it only when it asks for it.
struct LoadSampling {
  float temperature = 0;  // 0: greedy
  float top_p = 1;        // (0, 1]
  int top_k = 0;          // 0: no limit
};

// One request of a load test: a prompt of token ids (random prompts) or text (a dataset), and an
// exact output length (the server is asked to ignore EOS and not stop before it).
struct LoadRequest {
  std::string id;
  std::vector<int32_t> prompt_ids;  // empty: prompt_text
  std::string prompt_text;
  int output_tokens = 0;
  LoadSampling sampling;
  uint64_t seed = 0;  // of the server's draws for this request (when it samples)
};

// Times one streamed response from the moment it is constructed (the request is sent): TTFT at
// the first message that carries output, one inter-token gap between consecutive such messages.
class StreamTimer {
 public:
  using Clock = std::chrono::steady_clock;

  StreamTimer() : start_(Clock::now()), last_(start_) {}

  // A message carrying output arrived now; `tokens` is how many tokens it carries (protocols that
  // do not say count each message as one, and correct the total in Finish).
  void Arrived(int tokens = 1);

  // The response ended now. `error` empty: it succeeded. `reported_tokens`: the server's own
  // count of output tokens (OpenAI's usage.completion_tokens), which replaces the count of
  // arrivals when given.
  RequestRecord Finish(std::string error, std::optional<int> reported_tokens = std::nullopt);

 private:
  Clock::time_point start_, last_;
  RequestRecord record_;
  bool any_ = false;  // an output message arrived
};

// A server under load. Send is called from as many threads as requests are in flight.
class LoadTarget {
 public:
  virtual ~LoadTarget() = default;
  virtual RequestRecord Send(const LoadRequest& request) = 0;
};

}  // namespace tpserve
