#include "server/http/http_generation.h"

namespace tpserve {

void HttpGeneration::SetOnOutput(std::function<void()> on_output) {
  std::lock_guard<std::mutex> lock(mutex_);
  on_output_ = std::move(on_output);
}

void HttpGeneration::Notify() {
  std::function<void()> on_output;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    on_output = on_output_;
  }
  if (on_output) on_output();
}

void HttpGeneration::OnDelta(std::string text, std::vector<SampledToken> tokens) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.text += text;
    for (SampledToken& t : tokens) pending_.tokens.push_back(std::move(t));
  }
  Notify();
}

void HttpGeneration::OnFinish(FinishReason reason, int prompt_tokens, int completion_tokens,
                              const RequestTiming& /*timing*/) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.end = End{reason, prompt_tokens, completion_tokens};
  }
  Notify();
}

void HttpGeneration::OnError(Status status) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.error = std::move(status);
  }
  Notify();
}

HttpGeneration::Output HttpGeneration::Take() {
  std::lock_guard<std::mutex> lock(mutex_);
  Output out = std::move(pending_);
  pending_ = Output();
  return out;
}

}  // namespace tpserve
