// Tensor parallelism and batch invariance of the CPU decoder on the tiny model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "tests/engine/engine_test_util.h"

namespace tpserve {
namespace {

using testing::Argmax;
using testing::MakeEngine;
using testing::RunForced;

// Different rank counts sum the row-parallel partial products in a different order (f32), so
// logits may differ in the last bits; this bounds it. Logits have a standard deviation of ~4.
constexpr double kTpTolerance = 2e-3;

const std::vector<int32_t> kPrompt = {128000, 791, 4062, 14198, 39935, 35308, 927, 279, 16053, 5679};

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double{a[i]} - b[i]));
  return worst;
}

double StdDev(const std::vector<float>& v) {
  double mean = 0, sq = 0;
  for (float x : v) mean += x;
  mean /= v.size();
  for (float x : v) sq += (x - mean) * (x - mean);
  return std::sqrt(sq / v.size());
}

// Greedy continuation of TP=1, used as the forced decode inputs for every TP degree.
std::vector<int32_t> ReferenceContinuation(int steps) {
  auto engine = MakeEngine(1);
  std::vector<int32_t> tokens;
  for (int i = 0; i < steps; ++i) {
    auto rows = RunForced(*engine, kPrompt, tokens);
    tokens.push_back(Argmax(rows.back()));
  }
  return tokens;
}

TEST(TensorParallel, LogitsOfEveryDegreeMatchSingleRank) {
  const std::vector<int32_t> forced = ReferenceContinuation(6);
  auto single = MakeEngine(1);
  const auto reference = RunForced(*single, kPrompt, forced);
  ASSERT_EQ(reference.size(), forced.size() + 1);
  for (const auto& row : reference) {
    ASSERT_EQ(row.size(), 128256u);
    EXPECT_GT(StdDev(row), 1.0) << "logits collapsed: the test could not tell ranks apart";
  }
  for (int tp : {2, 4, 8}) {
    auto engine = MakeEngine(tp);
    const auto rows = RunForced(*engine, kPrompt, forced);
    for (size_t step = 0; step < rows.size(); ++step) {
      EXPECT_LT(MaxAbsDiff(rows[step], reference[step]), kTpTolerance) << "tp " << tp << " step " << step;
      // Greedy choices agree wherever the top-2 margin exceeds the tolerance.
      std::vector<float> sorted = reference[step];
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
      if (sorted[0] - sorted[1] > 2 * kTpTolerance) {
        EXPECT_EQ(Argmax(rows[step]), Argmax(reference[step])) << "tp " << tp << " step " << step;
      }
    }
  }
}

TEST(TensorParallel, SkippingOneAllReduceIsCaught) {
  const std::vector<int32_t> forced = {1000, 2000};
  auto single = MakeEngine(1);
  const auto reference = RunForced(*single, kPrompt, forced);
  auto broken = MakeEngine(2, /*skip_layer=*/1);
  const auto rows = RunForced(*broken, kPrompt, forced);
  EXPECT_GT(MaxAbsDiff(rows[0], reference[0]), 100 * kTpTolerance);
}

// A sequence's logits are bitwise identical whatever else shares its batch.
// (tp, kernel, KV cache dtype): each kernel keeps its own arithmetic fixed whatever the batch;
// companions' prompts of up to 23 tokens make prefill steps of over 128 tokens (the AMX kernel's
// second pass).
class BatchInvariance
    : public ::testing::TestWithParam<std::tuple<int, cpu::LinearKernel, cpu::KvDtype>> {};

TEST_P(BatchInvariance, LogitsDoNotDependOnBatchMates) {
  const auto [tp, kernel, kv_dtype] = GetParam();
  if (!cpu::LinearKernelAvailable(kernel)) GTEST_SKIP() << cpu::LinearKernelName(kernel) << " does not run here";
  auto engine = MakeEngine(tp, -1, 2, kernel, kv_dtype);
  const std::vector<int32_t> forced = {400, 500, 600};
  const auto alone = RunForced(*engine, kPrompt, forced);

  for (int batch : {2, 5, 17, 32}) {
    // The target plus batch - 1 companions with prompts of different lengths and contents.
    std::vector<SequencePlan> seqs;
    const int total = static_cast<int>(kPrompt.size() + forced.size());
    seqs.push_back({.sequence_id = 0, .tokens = kPrompt, .start_position = 0,
                    .block_table = testing::AllocateBlocks(*engine, total)});
    for (int c = 1; c < batch; ++c) {
      std::vector<int32_t> prompt;
      for (int k = 0; k < 1 + (c * 7) % 23; ++k) prompt.push_back((c * 1009 + k * 31) % 128000);
      seqs.push_back({.sequence_id = c, .tokens = prompt, .start_position = 0,
                      .block_table = testing::AllocateBlocks(*engine, static_cast<int>(prompt.size() + forced.size()))});
    }
    // Put the target in the middle of the plan.
    std::swap(seqs[0], seqs[batch / 2]);
    const size_t target = batch / 2;
    for (size_t step = 0; step <= forced.size(); ++step) {
      if (step > 0) {
        for (auto& s : seqs) {
          s.start_position += static_cast<int32_t>(s.tokens.size());
          s.tokens = {s.sequence_id == 0 ? forced[step - 1] : static_cast<int32_t>(step * 3 + s.sequence_id)};
        }
      }
      auto result = engine->Step(StepPlan{.step_id = static_cast<int64_t>(step), .sequences = seqs});
      ASSERT_TRUE(result.ok()) << result.status().ToString();
      EXPECT_EQ(result->trace.batch_size, batch);
      ASSERT_EQ(result->logit_rows, batch);
      const float* row = result->logits.data() + target * 128256;
      EXPECT_EQ(0, std::memcmp(row, alone[step].data(), 128256 * sizeof(float)))
          << cpu::LinearKernelName(kernel) << " kv " << cpu::KvDtypeName(kv_dtype) << " tp " << tp
          << " batch " << batch << " step " << step;
    }
    for (const auto& s : seqs) {
      for (int32_t b : s.block_table) engine->block_pool().Free(b);
    }
  }
}

std::string BatchInvarianceName(const ::testing::TestParamInfo<BatchInvariance::ParamType>& info) {
  return "tp" + std::to_string(std::get<0>(info.param)) + "_" +
         cpu::LinearKernelName(std::get<1>(info.param)) +
         (std::get<2>(info.param) == cpu::KvDtype::kBf16 ? "_bf16kv" : "");
}
INSTANTIATE_TEST_SUITE_P(
    DegreesAndKernels, BatchInvariance,
    ::testing::Combine(::testing::Values(1, 2),
                       ::testing::Values(cpu::LinearKernel::kAmx, cpu::LinearKernel::kAvx512Bf16,
                                         cpu::LinearKernel::kAvx512, cpu::LinearKernel::kAvx2),
                       ::testing::Values(cpu::KvDtype::kF32)),
    BatchInvarianceName);
// The bf16 KV cache with the kernel auto picks (its attention reads bf16; the Linears do not
// change).
INSTANTIATE_TEST_SUITE_P(Bf16KvCache, BatchInvariance,
                         ::testing::Combine(::testing::Values(1, 2),
                                            ::testing::Values(cpu::BestLinearKernel()),
                                            ::testing::Values(cpu::KvDtype::kBf16)),
                         BatchInvarianceName);

// The engine samples (the contract every backend keeps): one token per sequence that wants one,
// in plan order, with its parameters, its bans and its draw number.
TEST(Engine, SamplesEachSequenceThatWantsATokenWithItsOwnParameters) {
  auto engine = MakeEngine(2);
  const int vocab = engine->config().vocab_size;
  StepPlan plan;
  plan.sequences.push_back({.sequence_id = 1, .tokens = {128000, 791}, .start_position = 0,
                            .block_table = testing::AllocateBlocks(*engine, 2)});
  plan.sequences.push_back({.sequence_id = 2, .tokens = {128000, 9906, 1917}, .start_position = 0,
                            .block_table = testing::AllocateBlocks(*engine, 3), .want_logits = false});
  plan.sequences.push_back({.sequence_id = 3, .tokens = {128000, 40}, .start_position = 0,
                            .block_table = testing::AllocateBlocks(*engine, 2),
                            .sampling = {.temperature = 1.0f, .seed = 9}, .sampled_tokens = 4});
  auto first = engine->Step(plan);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_EQ(first->tokens.size(), 2u);
  ASSERT_EQ(first->logit_rows, 2);
  // Greedy: the largest logit of row 0, found here by a plain scan.
  const std::vector<float> row0(first->logits.begin(), first->logits.begin() + vocab);
  const int argmax = static_cast<int>(std::max_element(row0.begin(), row0.end()) - row0.begin());
  EXPECT_EQ(first->tokens[0].id, argmax);
  // Sampled: draw number 4 of seed 9 on row 1's logits.
  const std::vector<float> row1(first->logits.begin() + vocab, first->logits.begin() + 2 * vocab);
  EXPECT_EQ(first->tokens[1].id, SampleToken(row1, plan.sequences[2].sampling, {}, 4).id);

  // Before min_tokens a stop id is banned: with the argmax as a stop id, greedy takes the runner-up.
  plan.sequences[0].sampling = {.min_tokens = 1, .stop_token_ids = {argmax}};
  auto banned = engine->Step(plan);
  ASSERT_TRUE(banned.ok());
  std::vector<float> without_argmax = row0;
  without_argmax[argmax] = -INFINITY;
  const int runner_up = static_cast<int>(std::max_element(without_argmax.begin(), without_argmax.end()) -
                                         without_argmax.begin());
  EXPECT_EQ(banned->tokens[0].id, runner_up);
  EXPECT_EQ(banned->tokens[1].id, first->tokens[1].id);  // stateless: the same draw again
}

// Without logits wanted (serve, generate, bench-decode), a step whose rows are all greedy has the
// LM head find their tokens (cpu::GreedyLinear: the hi halves first, then the candidates exactly)
// and returns no logits: the tokens are the ones the host samples from the logits, bans included,
// step after step. A step with a sampled row takes the logits path.
TEST(Engine, GreedyRowsWithoutLogitsTakeTheTokensOfTheLogits) {
  const cpu::LinearKernel kernel = cpu::LinearKernel::kAvx512Bf16;
  if (!cpu::LinearKernelAvailable(kernel))
    GTEST_SKIP() << "avx512bf16 (the kernel that screens) does not run here";
  auto make = [&](bool return_logits) {
    EngineOptions options{.tp = 1,
                          .threads = 2,
                          .block_size = 4,
                          .kv_cache_mb = 16,
                          .return_logits = return_logits,
                          .linear_kernel = kernel};
    auto engine = Engine::Create(testing::TinyModel(), options);
    EXPECT_TRUE(engine.ok()) << engine.status().ToString();
    return std::move(engine).value();
  };
  auto with_logits = make(true), greedy_only = make(false);
  constexpr int kRows = 8, kSteps = 6;
  auto plan_for = [](Engine& engine) {
    StepPlan plan;
    for (int r = 0; r < kRows; ++r) {
      std::vector<int32_t> prompt = {128000};
      for (int k = 0; k < 2 + r % 5; ++k) prompt.push_back((r * 7919 + k * 104729) % 128000);
      plan.sequences.push_back({.sequence_id = r,
                                .tokens = prompt,
                                .start_position = 0,
                                .block_table = testing::AllocateBlocks(
                                    engine, static_cast<int>(prompt.size()) + kSteps)});
    }
    return plan;
  };
  StepPlan a = plan_for(*with_logits), b = plan_for(*greedy_only);
  const int vocab = with_logits->config().vocab_size;
  for (int step = 0; step < kSteps; ++step) {
    const bool sampled_row = step == 4;  // row 5 draws at temperature 1 in this step only
    for (StepPlan* plan : {&a, &b}) {
      plan->step_id = step;
      plan->sequences[5].sampling =
          sampled_row ? SamplingParams{.temperature = 1.0f, .seed = 3} : SamplingParams{};
    }
    auto expected = with_logits->Step(a);
    ASSERT_TRUE(expected.ok()) << expected.status().ToString();
    std::vector<int32_t> want;
    for (const SampledToken& token : expected->tokens) want.push_back(token.id);
    // In step 2, row 2 bans (a stop id before min_tokens) the token the logits make it take, so
    // it takes the runner-up: the first largest logit of another id, by a plain scan here.
    b.sequences[2].sampling = {};
    if (step == 2) {
      b.sequences[2].sampling = {.min_tokens = 1000, .stop_token_ids = {want[2]}};
      const float* row = expected->logits.data() + 2 * static_cast<size_t>(vocab);
      int runner_up = -1;
      for (int id = 0; id < vocab; ++id) {
        if (id != want[2] && (runner_up < 0 || row[id] > row[runner_up])) runner_up = id;
      }
      want[2] = runner_up;
    }
    auto got = greedy_only->Step(b);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(got->tokens.size(), static_cast<size_t>(kRows));
    EXPECT_EQ(got->logits.empty(), !sampled_row) << "step " << step;
    for (int r = 0; r < kRows; ++r)
      EXPECT_EQ(got->tokens[r].id, want[r]) << "step " << step << " row " << r;
    for (StepPlan* plan : {&a, &b}) {  // both go on with the tokens the greedy-only engine took
      for (int r = 0; r < kRows; ++r) {
        SequencePlan& seq = plan->sequences[r];
        seq.start_position += static_cast<int32_t>(seq.tokens.size());
        seq.tokens = {got->tokens[r].id};
        ++seq.sampled_tokens;
      }
    }
  }
}

TEST(Engine, BadPlansFailAloneAndTheEngineKeepsWorking) {
  auto engine = MakeEngine(2);
  SequencePlan bad{.sequence_id = 9, .tokens = {5, 999999}, .start_position = 0,
                   .block_table = testing::AllocateBlocks(*engine, 2)};
  auto result = engine->Step(StepPlan{.sequences = {bad}});
  EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), ::testing::HasSubstr("token id 999999 is outside the vocabulary"));
  bad.tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9};  // more positions than the block table covers
  EXPECT_THAT(engine->Step(StepPlan{.sequences = {bad}}).status().message(),
              ::testing::HasSubstr("block table covers 4 positions, needs 9"));
  EXPECT_EQ(RunForced(*engine, kPrompt, {}).size(), 1u);
}

}  // namespace
}  // namespace tpserve

namespace tpserve {
namespace {

// --trace-every N: every Nth step times each op; the others keep only their totals and say so.
TEST(Engine, TraceEveryNthStepTimesTheOpsOfThoseStepsOnly) {
  EngineOptions options{.tp = 2, .threads = 2, .block_size = 4, .kv_cache_mb = 16, .trace_every = 3};
  auto engine = Engine::Create(testing::TinyModel(), options);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  SequencePlan seq{.sequence_id = 1, .tokens = {128000, 791}, .start_position = 0,
                   .block_table = testing::AllocateBlocks(**engine, 12)};
  for (int step = 0; step < 7; ++step) {
    auto result = (*engine)->Step(StepPlan{.step_id = step, .sequences = {seq}});
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    const bool timed = step % 3 == 0;
    EXPECT_EQ(result->trace.per_op, timed) << "step " << step;
    for (const RankTrace& rank : result->trace.ranks) {
      EXPECT_EQ(rank.ops.empty(), !timed) << "step " << step << " rank " << rank.rank;
      EXPECT_GT(rank.total_ns, 0) << "step " << step;
    }
    seq.start_position += static_cast<int32_t>(seq.tokens.size());
    seq.tokens = {result->tokens[0].id};
  }
  // Turned off, no step times its ops.
  (*engine)->set_trace(false);
  auto result = (*engine)->Step(StepPlan{.step_id = 7, .sequences = {seq}});
  ASSERT_TRUE(result.ok());
  EXPECT_FALSE(result->trace.per_op);
  EXPECT_TRUE(result->trace.ranks[0].ops.empty());
}

}  // namespace
}  // namespace tpserve
