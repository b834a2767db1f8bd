// A GenerationSink that only counts requests that ended (finished or failed), for tests that
// drive the engine loop directly.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "server/engine_loop.h"

namespace tpserve::testing {

class CountingSink final : public GenerationSink {
 public:
  explicit CountingSink(std::atomic<int>* ended) : ended_(ended) {}
  void OnDelta(std::string, std::vector<SampledToken>) override {}
  void OnFinish(FinishReason, int, int, const RequestTiming&) override { ++*ended_; }
  void OnError(Status) override { ++*ended_; }

 private:
  std::atomic<int>* ended_;
};

}  // namespace tpserve::testing
