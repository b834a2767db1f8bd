// Issue 32: automatic prefix caching changes no output. The same requests run through the engine
// loop on the tiny model with --prefix-caching on and off, at TP 1, 2 and 4: greedy and seeded
// sampling, cache hits of nothing, part of a prompt and the whole prompt but its last token, then
// a concurrent batch under chunked prefill and a KV cache small enough to preempt. Every token id
// and every logprob (the chosen token's and the top alternatives', compared as bits) must be equal.
#include <gtest/gtest.h>

#include <bit>
#include <mutex>
#include <thread>

#include "server/engine_loop.h"
#include "tests/engine/engine_test_util.h"

namespace tpserve {
namespace {

// Keeps every sampled token of one request.
class CollectingSink final : public GenerationSink {
 public:
  void OnDelta(std::string, std::vector<SampledToken> tokens) override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (SampledToken& t : tokens) tokens_.push_back(std::move(t));
  }
  void OnFinish(FinishReason, int, int, const RequestTiming&) override { done_ = true; }
  void OnError(Status status) override {
    error_ = status.ToString();
    done_ = true;
  }
  bool done() const { return done_; }
  std::string error() const { return error_; }
  std::vector<SampledToken> tokens() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return tokens_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<SampledToken> tokens_;
  std::atomic<bool> done_{false};
  std::string error_;
};

struct Case {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int max_tokens = 8;
};

// One token's outcome as comparable values: the id, and each logprob's bits.
std::vector<uint64_t> Bits(const std::vector<SampledToken>& tokens) {
  std::vector<uint64_t> out;
  for (const SampledToken& t : tokens) {
    out.push_back(static_cast<uint32_t>(t.id));
    out.push_back(std::bit_cast<uint32_t>(t.logprob));
    for (const TokenLogprob& alt : t.top) {
      out.push_back(static_cast<uint32_t>(alt.id));
      out.push_back(std::bit_cast<uint32_t>(alt.logprob));
    }
  }
  return out;
}

struct ServedRun {
  std::vector<std::vector<uint64_t>> outputs;  // per case
  uint64_t hits = 0, queries = 0, preemptions = 0;
};

// `sequential` cases one at a time (each finds what the ones before it cached), then `batch` all
// at once.
ServedRun Serve(int tp, bool prefix_caching, int kv_blocks, const std::vector<Case>& sequential,
          const std::vector<Case>& batch) {
  EngineOptions engine_options{.tp = tp, .threads = 2, .block_size = 4, .kv_cache_blocks = kv_blocks};
  auto engine = Engine::Create(testing::TinyModel(), engine_options);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  EngineLoopOptions options{.scheduler = {.max_batch_size = 8, .max_batched_tokens = 24, .block_size = 4,
                                          .prefix_caching = prefix_caching},
                            .max_queue = 64,
                            .max_wait_us = 2000};
  ServerMetrics metrics;
  EngineLoop loop(engine->get(), &testing::TinyModel().tokenizer, options, &metrics);
  loop.Start();
  ServedRun run;
  auto submit = [&](const Case& c) {
    ServeRequest request;
    request.prompt = c.prompt;
    request.max_tokens = c.max_tokens;
    request.sampling = c.sampling;
    auto sink = std::make_shared<CollectingSink>();
    request.sink = sink;
    EXPECT_TRUE(loop.Submit(std::move(request)).ok());
    return sink;
  };
  auto wait = [](const std::shared_ptr<CollectingSink>& sink) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (!sink->done() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    EXPECT_TRUE(sink->done());
    EXPECT_EQ(sink->error(), "");
  };
  for (const Case& c : sequential) {
    auto sink = submit(c);
    wait(sink);
    run.outputs.push_back(Bits(sink->tokens()));
  }
  std::vector<std::shared_ptr<CollectingSink>> sinks;
  for (const Case& c : batch) sinks.push_back(submit(c));
  for (auto& sink : sinks) {
    wait(sink);
    run.outputs.push_back(Bits(sink->tokens()));
  }
  loop.Stop();
  run.hits = metrics.prefix_cache_hits.load();
  run.queries = metrics.prefix_cache_queries.load();
  run.preemptions = metrics.preemptions.load();
  return run;
}

std::vector<int32_t> Concat(std::vector<int32_t> head, const std::vector<int32_t>& tail) {
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

std::vector<int32_t> Range(int32_t first, int count) {
  std::vector<int32_t> out;
  for (int i = 0; i < count; ++i) out.push_back(first + 37 * i % 5000);
  return out;
}

TEST(PrefixCacheExactness, OutputsAreBitwiseTheSameWithAndWithoutTheCache) {
  const std::vector<int32_t> system = Range(1000, 30);  // 7 full blocks of 4 and 2 tokens
  const SamplingParams greedy{.logprobs = 3};
  const SamplingParams seeded{.temperature = 0.9f, .top_k = 40, .seed = 1234, .logprobs = 3};
  const std::vector<Case> sequential = {
      {Concat(system, Range(7000, 5)), greedy},            // nothing cached yet
      {Concat(system, Range(8000, 6)), greedy},            // the system prompt's 7 blocks
      {Concat(system, Range(7000, 5)), seeded},            // the whole prompt but its last token
      {Concat(system, Range(7000, 5)), greedy},            // and again, greedy: the first case's output
      {Range(20000, 17), seeded},                          // nothing shared
      {Concat(Range(20000, 16), Range(9000, 3)), greedy},  // four blocks of the one before
  };
  std::vector<Case> batch;  // together: chunked at 24 tokens a step, preempting in 40 blocks
  for (int i = 0; i < 6; ++i) {
    batch.push_back({Concat(system, Range(30000 + 100 * i, 3 + i)), i % 2 ? seeded : greedy, 12});
    batch.back().sampling.seed += i;
  }
  for (int tp : {1, 2, 4}) {
    const ServedRun off = Serve(tp, false, 40, sequential, batch);
    const ServedRun on = Serve(tp, true, 40, sequential, batch);
    ASSERT_EQ(off.outputs.size(), on.outputs.size());
    for (size_t i = 0; i < off.outputs.size(); ++i) {
      EXPECT_FALSE(off.outputs[i].empty());
      EXPECT_EQ(off.outputs[i], on.outputs[i]) << "TP=" << tp << ", request " << i;
    }
    EXPECT_EQ(on.outputs[0], on.outputs[3]) << "greedy, the same prompt: the same output";
    EXPECT_EQ(off.hits, 0u);
    EXPECT_EQ(off.queries, 0u);
    // Hits of each kind happened: the system prompt (28 tokens), the whole prompt but its last
    // token (32 of 35, twice), 16 tokens of the unshared prompt, and the batch's system prompts.
    EXPECT_GE(on.hits, 28u + 32u + 32u + 16u) << "TP=" << tp;
    EXPECT_GT(on.preemptions + off.preemptions, 0u) << "the batch should preempt in one of the runs";
  }
}

}  // namespace
}  // namespace tpserve
