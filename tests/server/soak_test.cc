// Soak, overload and a cancellation storm against the real server on loopback, bounded in count and
// time. TPSERVE_SOAK=short (CI: the tiny model, under a minute) or full (label slow: the small
// model with random weights, two minutes of overload, ten thousand cancellations).
//  - Overload: hundreds of closed-loop streams plus an open-loop rate above capacity. Every request
//    ends with its full answer — equal to the same request run alone (greedy) — or a clear status:
//    RESOURCE_EXHAUSTED (queue full), DEADLINE_EXCEEDED (its deadline) or UNAVAILABLE; nothing is
//    lost. The server's RSS stays under a stated bound throughout.
//  - Cancellation storm: thousands of requests cancelled at random points.
//  - Afterwards, each time: no request running or waiting, every KV block free, the thread count
//    back to its idle value, and the server still answers correctly.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "tests/engine/engine_test_util.h"
#include "tests/server/server_process.h"
#include "tpserve/v1/tpserve.grpc.pb.h"

namespace tpserve {
namespace {

using Clock = std::chrono::steady_clock;
using testing::ServerProcess;

// Threads above the idle count still accepted afterwards: gRPC's pools keep a few of the threads
// an overload grew (idle measured 18 after the warm-up burst and 21 after the 300-stream overload
// under ctest -j2, twice in CI runs; a slack of 2 failed there). A leak shows far above this: one
// thread per request would be hundreds after the overload's 300 streams.
constexpr int kThreadSlack = 4;

struct Profile {
  bool full = false;
  int streams = 300;          // closed-loop clients: more than batch + queue, so some are refused
  int max_queue = 160;        // the server's: most streams are inside the server at once
  double open_rate = 60;      // extra arrivals per second (open loop)
  double seconds = 15;        // of overload
  int cancellations = 1500;   // in the storm
  int max_tokens = 24;
  int64_t rss_bound_mb = 1536;
};

Profile ThisProfile() {
  const char* env = std::getenv("TPSERVE_SOAK");
  Profile p;
  if (env != nullptr && std::string(env) == "full") {
    p = {.full = true, .streams = 600, .max_queue = 320, .open_rate = 100, .seconds = 120, .cancellations = 10000, .max_tokens = 32,
         .rss_bound_mb = 3072};
  }
  return p;
}

// A line of /proc/PID/status ("VmRSS:", "Threads:") as a number (kB for VmRSS); -1 if absent.
int64_t ProcStatus(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field, 0) == 0) return std::stoll(line.substr(field.size()));
  }
  return -1;
}

const std::vector<std::string> kPrompts = {"Hello", "The quick brown fox", "Once upon a time", "1 2 3 4 5",
                                           "Bonjour tout le monde", "def main():", "你好，世界", "A B C D E F G"};

struct Answer {
  grpc::Status status;
  std::vector<int32_t> ids;
};

Answer Generate(v1::TpServe::Stub& stub, const std::string& prompt, int max_tokens, double deadline_s,
                grpc::ClientContext* context_out = nullptr, std::function<void(grpc::ClientContext&)> on_start = {}) {
  grpc::ClientContext own;
  grpc::ClientContext& context = context_out ? *context_out : own;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(deadline_s * 1e3)));
  v1::GenerateRequest request;
  request.set_text(prompt);
  request.set_max_tokens(max_tokens);
  request.set_ignore_eos(true);
  auto reader = stub.Generate(&context, request);
  if (on_start) on_start(context);
  Answer answer;
  v1::GenerateResponse response;
  while (reader->Read(&response)) answer.ids.insert(answer.ids.end(), response.token_ids().begin(), response.token_ids().end());
  answer.status = reader->Finish();
  return answer;
}

v1::StatsResponse Stats(v1::TpServe::Stub& stub) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::StatsResponse stats;
  EXPECT_TRUE(stub.Stats(&context, v1::StatsRequest(), &stats).ok());
  return stats;
}

class Soak : public ::testing::Test {
 protected:
  void SetUp() override {
    // short: the tiny model; full: the small one (make-model's `small` shape, random weights).
    std::vector<std::string> model = {"--model", testing::TinyModelPath()};
    if (profile_.full) model = {"--model", "small", "--load-format", "dummy"};
    std::vector<std::string> args = {"serve", "--port", "0", "--metrics-port", "0", "--threads", "2", "--tp", "2",
                                     "--max-batch-size", "32", "--max-queue", std::to_string(profile_.max_queue)};
    args.insert(args.begin() + 1, model.begin(), model.end());
    ASSERT_TRUE(server_.Start(args)) << server_.log();
    channel_ = grpc::CreateChannel(server_.grpc_target(), grpc::InsecureChannelCredentials());
    stub_ = v1::TpServe::NewStub(channel_);
    // References: each prompt alone, greedy; and the idle thread count after one request has run.
    for (const std::string& prompt : kPrompts) {
      Answer alone = Generate(*stub_, prompt, profile_.max_tokens, 120);
      ASSERT_TRUE(alone.status.ok()) << alone.status.error_message();
      ASSERT_EQ(static_cast<int>(alone.ids.size()), profile_.max_tokens);
      reference_[prompt] = alone.ids;
    }
    // gRPC's thread pools grow with the first concurrent calls and keep a few threads: warm them
    // with a concurrent burst first, so that "idle" is the server's steady idle state.
    std::vector<std::thread> burst;
    for (int i = 0; i < 64; ++i) burst.emplace_back([&, i] { (void)Generate(*stub_, kPrompts[i % kPrompts.size()], 2, 60); });
    for (auto& t : burst) t.join();
    std::this_thread::sleep_for(std::chrono::seconds(1));
    idle_threads_ = ProcStatus(server_.pid(), "Threads:");
    idle_rss_mb_ = ProcStatus(server_.pid(), "VmRSS:") / 1024;
  }

  void TearDown() override { EXPECT_EQ(server_.Stop(), 0) << server_.log(); }

  // After load: nothing running or waiting, every KV block free, threads back to idle (within 20 s,
  // as gRPC retires the extra threads of its pools), and a correct answer.
  void ExpectBackToIdle(const char* after) {
    v1::StatsResponse stats;
    int64_t threads = 0;
    const auto until = Clock::now() + std::chrono::seconds(20);
    do {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      stats = Stats(*stub_);
      threads = ProcStatus(server_.pid(), "Threads:");
    } while (Clock::now() < until && (stats.requests_running() + stats.requests_waiting() > 0 ||
                                      stats.kv_blocks_free() != stats.kv_blocks_total() || threads > idle_threads_ + kThreadSlack));
    EXPECT_EQ(stats.requests_running(), 0) << after;
    EXPECT_EQ(stats.requests_waiting(), 0) << after;
    EXPECT_EQ(stats.kv_blocks_free(), stats.kv_blocks_total()) << after << ": KV blocks leaked";
    EXPECT_LE(threads, idle_threads_ + kThreadSlack) << after << ": threads " << threads << " vs " << idle_threads_ << " idle";
    Answer again = Generate(*stub_, kPrompts[0], profile_.max_tokens, 60);
    EXPECT_TRUE(again.status.ok()) << after << ": " << again.status.error_message();
    EXPECT_EQ(again.ids, reference_[kPrompts[0]]) << after;
    std::printf("[soak] %s: idle again, %ld threads (idle %ld), RSS %ld MB (idle %ld MB)\n", after,
                static_cast<long>(threads), static_cast<long>(idle_threads_),
                static_cast<long>(ProcStatus(server_.pid(), "VmRSS:") / 1024), static_cast<long>(idle_rss_mb_));
  }

  Profile profile_ = ThisProfile();
  ServerProcess server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::TpServe::Stub> stub_;
  std::map<std::string, std::vector<int32_t>> reference_;
  int64_t idle_threads_ = 0, idle_rss_mb_ = 0;
};

TEST_F(Soak, OverloadEveryRequestEndsWithItsAnswerOrAClearStatus) {
  std::mutex mutex;
  std::map<std::string, int> outcomes;  // status name -> count
  std::vector<std::string> problems;
  std::atomic<int64_t> peak_rss_kb{0};
  std::atomic<bool> stop{false};
  auto record = [&](const std::string& prompt, int max_tokens, const Answer& a) {
    std::lock_guard<std::mutex> lock(mutex);
    switch (a.status.error_code()) {
      case grpc::StatusCode::OK: {
        const std::vector<int32_t>& ref = reference_[prompt];
        if (a.ids != std::vector<int32_t>(ref.begin(), ref.begin() + max_tokens)) {
          problems.push_back("a corrupted answer for '" + prompt + "'");
        }
        ++outcomes["OK"];
        break;
      }
      case grpc::StatusCode::RESOURCE_EXHAUSTED: ++outcomes["RESOURCE_EXHAUSTED"]; break;
      case grpc::StatusCode::DEADLINE_EXCEEDED: ++outcomes["DEADLINE_EXCEEDED"]; break;
      case grpc::StatusCode::UNAVAILABLE: ++outcomes["UNAVAILABLE"]; break;
      default:
        problems.push_back("status " + std::to_string(a.status.error_code()) + ": " + a.status.error_message());
    }
  };
  std::thread rss_watch([&] {
    while (!stop) {
      int64_t rss = ProcStatus(server_.pid(), "VmRSS:");
      int64_t seen = peak_rss_kb.load();
      while (rss > seen && !peak_rss_kb.compare_exchange_weak(seen, rss)) {}
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  const auto end = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(profile_.seconds * 1e3));
  std::atomic<int> sent{0};
  // Several connections (the server allows --max-concurrent-streams calls on each; 50 clients per
  // connection here), as many clients would open.
  std::vector<std::unique_ptr<v1::TpServe::Stub>> connections;
  for (int c = 0; c < profile_.streams; c += 50) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // its own TCP connection
    connections.push_back(v1::TpServe::NewStub(
        grpc::CreateCustomChannel(server_.grpc_target(), grpc::InsecureChannelCredentials(), args)));
  }
  std::vector<std::thread> clients;
  for (int c = 0; c < profile_.streams; ++c) {  // closed loop: one stream each, back to back
    clients.emplace_back([&, c] {
      v1::TpServe::Stub& stub = *connections[c / 50];
      std::mt19937 random(c);
      while (Clock::now() < end) {
        const std::string& prompt = kPrompts[random() % kPrompts.size()];
        const int max_tokens = 1 + static_cast<int>(random() % profile_.max_tokens);
        const double deadline = random() % 10 == 0 ? 0.05 : 60;  // one in ten may run out of time
        ++sent;
        Answer a = Generate(stub, prompt, max_tokens, deadline);
        record(prompt, max_tokens, a);
        if (a.status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a polite client backs off
        }
      }
    });
  }
  std::vector<std::thread> arrivals;  // open loop above capacity: never waits for answers
  std::thread open_loop([&] {
    std::mt19937 random(99);
    std::exponential_distribution<double> gap(profile_.open_rate);
    for (auto next = Clock::now(); next < end; next += std::chrono::microseconds(static_cast<int64_t>(gap(random) * 1e6))) {
      std::this_thread::sleep_until(next);
      const std::string prompt = kPrompts[random() % kPrompts.size()];
      const int max_tokens = profile_.max_tokens;
      ++sent;
      arrivals.emplace_back([&, prompt, max_tokens] { record(prompt, max_tokens, Generate(*stub_, prompt, max_tokens, 60)); });
    }
  });
  open_loop.join();
  for (auto& t : clients) t.join();
  for (auto& t : arrivals) t.join();
  stop = true;
  rss_watch.join();

  int answered = 0;
  for (const auto& [name, count] : outcomes) answered += count;
  EXPECT_EQ(answered + static_cast<int>(problems.size()), sent.load()) << "requests lost";
  EXPECT_TRUE(problems.empty()) << problems.size() << " problems, first: " << (problems.empty() ? "" : problems[0]);
  EXPECT_GT(outcomes["OK"], 0);
  EXPECT_GT(outcomes["RESOURCE_EXHAUSTED"], 0) << "the load did not exceed the queue";
  const int64_t peak_mb = peak_rss_kb.load() / 1024;
  EXPECT_LT(peak_mb, profile_.rss_bound_mb) << "RSS bound";
  std::printf("[soak] overload %.0f s, %d streams + %.0f/s open loop: %d requests:", profile_.seconds, profile_.streams,
              profile_.open_rate, sent.load());
  for (const auto& [name, count] : outcomes) std::printf(" %s %d", name.c_str(), count);
  std::printf("; peak RSS %ld MB (bound %ld MB, idle %ld MB)\n", static_cast<long>(peak_mb),
              static_cast<long>(profile_.rss_bound_mb), static_cast<long>(idle_rss_mb_));
  ExpectBackToIdle("after the overload");
}

TEST_F(Soak, CancellationStormLeaksNothing) {
  const int64_t rss_before_mb = ProcStatus(server_.pid(), "VmRSS:") / 1024;
  std::atomic<int> next{0}, cancelled{0}, finished{0}, other{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < 64; ++w) {
    workers.emplace_back([&, w] {
      std::mt19937 random(1000 + w);
      for (int i; (i = next++) < profile_.cancellations;) {
        const std::string& prompt = kPrompts[random() % kPrompts.size()];
        const int delay_us = static_cast<int>(random() % 30000);  // queued, prefilling or decoding
        grpc::ClientContext context;
        std::thread canceller;
        Answer a = Generate(*stub_, prompt, profile_.max_tokens, 60, &context, [&](grpc::ClientContext& c) {
          canceller = std::thread([&c, delay_us] {
            std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
            c.TryCancel();
          });
        });
        canceller.join();
        if (a.status.error_code() == grpc::StatusCode::CANCELLED) {
          ++cancelled;
        } else if (a.status.ok() || a.status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
          ++finished;  // done (or refused) before the cancel landed
        } else {
          ++other;
        }
      }
    });
  }
  for (auto& t : workers) t.join();
  EXPECT_EQ(cancelled + finished + other, profile_.cancellations);
  EXPECT_EQ(other.load(), 0);
  EXPECT_GT(cancelled.load(), profile_.cancellations / 4) << "too few cancellations landed";
  std::printf("[soak] cancellation storm: %d requests, %d cancelled mid-way, %d finished or refused first\n",
              profile_.cancellations, cancelled.load(), finished.load());
  ExpectBackToIdle("after the cancellation storm");
  const int64_t growth_mb = ProcStatus(server_.pid(), "VmRSS:") / 1024 - rss_before_mb;
  EXPECT_LT(growth_mb, 256) << "RSS grew by " << growth_mb << " MB over the storm";
}

}  // namespace
}  // namespace tpserve
