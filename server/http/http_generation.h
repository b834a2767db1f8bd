// One HTTP request's output on its way from the engine thread to the connection that writes it:
// the engine loop's sink appends and calls the on-output callback; the connection takes everything
// new at once (so a client slower than the engine gets fewer, larger chunks instead of a growing
// backlog of writes).
#pragma once

#include <functional>
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

  // Called on the engine's thread, outside the lock, after each delta, the finish or an error.
  void SetOnOutput(std::function<void()> on_output);

  void OnDelta(std::string text, std::vector<SampledToken> tokens) override;
  void OnFinish(FinishReason reason, int prompt_tokens, int completion_tokens, const RequestTiming& timing) override;
  void OnError(Status status) override;

  // What there is now (possibly nothing); never waits.
  Output Take();

 private:
  void Notify();

  std::mutex mutex_;
  Output pending_;
  std::function<void()> on_output_;
};

}  // namespace tpserve
