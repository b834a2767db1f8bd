// The engine loop on the tiny model, driven from several threads as gRPC's threads drive it.
#include "server/engine_loop.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "tests/engine/engine_test_util.h"
#include "tests/server/counting_sink.h"

namespace tpserve {
namespace {

using testing::CountingSink;

ServeRequest SmallRequest(std::atomic<int>* ended) {
  ServeRequest r;
  r.prompt = {128000, 791, 6864};
  r.max_tokens = 6;
  r.sampling.ignore_eos = true;
  r.sink = std::make_shared<CountingSink>(ended);
  return r;
}

void AtomicMax(std::atomic<int>& peak, int value) {
  int seen = peak.load();
  while (value > seen && !peak.compare_exchange_weak(seen, value)) {
  }
}

bool WaitUntilIdle(const EngineLoop& loop) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (loop.in_flight() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return loop.in_flight() == 0;
}

// Issue 9: the queue limit was checked against a gauge refreshed only after each step, so
// requests arriving during a step were not counted (128 admitted for 64 + 32 slots).
TEST(EngineLoopQueue, ConcurrentSubmissionsNeverExceedTheLimitAndAnIdleLoopNeverRefuses) {
  auto engine = testing::MakeEngine(/*tp=*/1);
  ServerMetrics metrics;
  constexpr int kBatch = 2, kQueue = 6, kThreads = 6, kPerThread = 100;
  EngineLoopOptions options{.scheduler = {.max_batch_size = kBatch, .max_batched_tokens = 64},
                            .max_queue = kQueue, .max_wait_us = 0};
  EngineLoop loop(engine.get(), &testing::TinyModel().tokenizer, options, &metrics);
  loop.Start();

  std::atomic<int> accepted{0}, refused{0}, ended{0}, peak_outstanding{0}, peak_waiting{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) {
        auto id = loop.Submit(SmallRequest(&ended));
        AtomicMax(peak_waiting, metrics.requests_waiting.load());
        if (!id.ok()) {
          EXPECT_EQ(id.status().code(), StatusCode::kResourceExhausted) << id.status().ToString();
          ++refused;
          std::this_thread::yield();
          continue;
        }
        // Counted after the request is in and before it can end: never more than the truth.
        AtomicMax(peak_outstanding, ++accepted - ended.load());
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(WaitUntilIdle(loop));

  EXPECT_LE(peak_waiting.load(), kQueue);
  EXPECT_LE(peak_outstanding.load(), kBatch + kQueue);
  EXPECT_GT(refused.load(), 0) << "the test did not fill the queue";
  EXPECT_EQ(accepted + refused, kThreads * kPerThread);
  EXPECT_EQ(ended.load(), accepted.load());
  EXPECT_EQ(metrics.requests_waiting.load(), 0);

  // A storm of requests cancelled at once (as by short deadlines) gives every slot back.
  std::vector<uint64_t> ids;
  for (int i = 0; i < kQueue; ++i) {
    auto id = loop.Submit(SmallRequest(&ended));
    if (id.ok()) ids.push_back(*id);
  }
  for (uint64_t id : ids) loop.Cancel(id);
  ASSERT_TRUE(WaitUntilIdle(loop));
  EXPECT_EQ(metrics.requests_waiting.load(), 0);

  // Idle: a burst of kQueue requests is accepted whatever the timing.
  for (int i = 0; i < kQueue; ++i) {
    auto id = loop.Submit(SmallRequest(&ended));
    EXPECT_TRUE(id.ok()) << "request " << i << ": " << id.status().ToString();
  }
  ASSERT_TRUE(WaitUntilIdle(loop));
  loop.Stop();
}

}  // namespace
}  // namespace tpserve
