// The engine-failed path (engine/engine.h) under each injected fault (engine/step/fault_injection.h): the
// failing step returns an error naming the fault within the collective timeout, every later step
// returns that error at once, and the engine is destroyed without hanging, stalled rank included.
#include <gtest/gtest.h>

#include <cctype>
#include <chrono>

#include "engine/step/fault_injection.h"
#include "tests/engine/engine_test_util.h"

namespace tpserve {
namespace {

TEST(FaultInjection, ParsesEveryKindAndRefusesTheRestNamingTheFlag) {
  auto stall = FaultInjection::Parse("stall@3:1");
  ASSERT_TRUE(stall.ok()) << stall.status().ToString();
  EXPECT_EQ(stall->kind, FaultKind::kStall);
  EXPECT_EQ(stall->step, 3);
  EXPECT_EQ(stall->rank, 1);
  EXPECT_EQ(stall->ToString(), "stall@3:1");
  auto fail = FaultInjection::Parse("fail@0");
  ASSERT_TRUE(fail.ok());
  EXPECT_EQ(fail->rank, -1);
  EXPECT_TRUE(fail->Hits(0, 0));
  EXPECT_TRUE(fail->Hits(0, 5));   // every rank
  EXPECT_FALSE(fail->Hits(1, 0));  // only that pass
  auto comm = FaultInjection::Parse("comm-error@7");
  ASSERT_TRUE(comm.ok());
  EXPECT_TRUE(comm->Hits(7, 0));   // one rank: rank 0 unless named
  EXPECT_FALSE(comm->Hits(7, 1));
  ASSERT_TRUE(FaultInjection::Parse("throw@2:3").ok());
  for (const char* bad : {"", "stall", "stall@", "stall@x", "melt@3", "stall@3:", "stall@3:a", "stall@-1"}) {
    auto parsed = FaultInjection::Parse(bad);
    EXPECT_FALSE(parsed.ok()) << bad;
    EXPECT_NE(parsed.status().message().find("--debug-fault"), std::string::npos) << parsed.status().message();
  }
}

struct Case {
  const char* fault;
  int tp;
  StatusCode code;
  const char* message;  // part of the step's error
};

class EngineFaults : public ::testing::TestWithParam<Case> {};

TEST_P(EngineFaults, TheFailingStepNamesTheFaultAndTheEngineStaysFailed) {
  const Case& c = GetParam();
  auto fault = FaultInjection::Parse(c.fault);
  ASSERT_TRUE(fault.ok());
  EngineOptions options{.tp = c.tp, .threads = 2, .block_size = 4, .kv_cache_mb = 16,
                        .collective_timeout_ms = 500, .fault = *fault};
  auto engine = Engine::Create(testing::TinyModel(), options);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  SequencePlan seq{.sequence_id = 1, .tokens = {128000, 791}, .start_position = 0,
                   .block_table = testing::AllocateBlocks(**engine, 12)};
  const auto start = std::chrono::steady_clock::now();
  Status failed;
  int step = 0;
  for (; step < 5 && failed.ok(); ++step) {
    auto result = (*engine)->Step(StepPlan{.step_id = step, .sequences = {seq}});
    if (!result.ok()) {
      failed = result.status();
      break;
    }
    seq.start_position += static_cast<int32_t>(seq.tokens.size());
    seq.tokens = {result->tokens[0].id};
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(step, 2) << "the fault is at the third forward pass";
  EXPECT_EQ(failed.code(), c.code) << failed.ToString();
  EXPECT_NE(failed.message().find(c.message), std::string::npos) << failed.ToString();
  EXPECT_NE(failed.message().find("the engine failed at step 2"), std::string::npos) << failed.ToString();
  EXPECT_LT(seconds, 30.0);  // two collective timeouts at most, plus the steps themselves
  EXPECT_EQ((*engine)->failure().code(), c.code);
  // Dead from now on: the same error, without running anything.
  auto again = (*engine)->Step(StepPlan{.step_id = 3, .sequences = {seq}});
  EXPECT_EQ(again.status().message(), failed.message());
  // Destruction releases an injected stall and returns.
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, EngineFaults,
    ::testing::Values(Case{"fail@2", 2, StatusCode::kInternal, "injected fault fail@2"},
                      Case{"throw@2:1", 2, StatusCode::kInternal, "rank 1 threw: rank 1: injected fault throw@2:1"},
                      Case{"throw@2", 1, StatusCode::kInternal, "rank 0 threw"},
                      Case{"stall@2:1", 2, StatusCode::kDeadlineExceeded, "rank(s) 1 still had not returned"},
                      Case{"comm-error@2:1", 2, StatusCode::kUnavailable, "comm-error@2:1 (a collective failed)"},
                      Case{"comm-error@2:0", 4, StatusCode::kUnavailable, "a collective failed"}),
    [](const ::testing::TestParamInfo<Case>& param) {
      std::string name = std::string(param.param.fault) + "_tp" + std::to_string(param.param.tp);
      for (char& ch : name) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
      return name;
    });

}  // namespace
}  // namespace tpserve
