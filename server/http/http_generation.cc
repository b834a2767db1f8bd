#include "server/http/http_generation.h"

namespace tpserve {

void HttpGeneration::OnDelta(std::string text, std::vector<SampledToken> tokens) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.text += text;
    for (SampledToken& t : tokens) pending_.tokens.push_back(std::move(t));
  }
  ready_.notify_one();
}

void HttpGeneration::OnFinish(FinishReason reason, int prompt_tokens, int completion_tokens,
                              const RequestTiming& /*timing*/) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.end = End{reason, prompt_tokens, completion_tokens};
  }
  ready_.notify_one();
}

void HttpGeneration::OnError(Status status) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.error = std::move(status);
  }
  ready_.notify_one();
}

HttpGeneration::Output HttpGeneration::Take(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait_for(lock, timeout, [&] { return !pending_.text.empty() || !pending_.tokens.empty() || pending_.done(); });
  Output out = std::move(pending_);
  pending_ = Output();
  return out;
}

}  // namespace tpserve
