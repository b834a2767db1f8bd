// One HTTP request's output on its way from the engine thread to the HTTP thread that writes it:
// the engine loop's sink appends, the HTTP thread takes everything new at once (so a client
// slower than the engine gets fewer, larger chunks instead of a growing backlog of writes).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "server/engine_loop.h"

namespace tpserve {

class HttpGeneration final : public GenerationSink {
 public:
  struct End {
    FinishReason reason = FinishReason::kLength;
    int prompt_tokens = 0;
    int completion_tokens = 0;
  };
  // What arrived since the last Take.
  struct Output {
    std::string text;
    std::vector<SampledToken> tokens;
    std::optional<End> end;        // finished (set once, with the last text)
    std::optional<Status> error;   // failed instead
    bool done() const { return end.has_value() || error.has_value(); }
  };

  void OnDelta(std::string text, std::vector<SampledToken> tokens) override;
  void OnFinish(FinishReason reason, int prompt_tokens, int completion_tokens, const RequestTiming& timing) override;
  void OnError(Status status) override;

  // Waits up to `timeout` for output, then returns what there is (possibly nothing).
  Output Take(std::chrono::milliseconds timeout);

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  Output pending_;
};

}  // namespace tpserve
