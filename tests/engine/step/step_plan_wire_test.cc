// The step plan's wire form: every field survives the round trip, and a short, corrupted or
// foreign message is an error that names what is wrong, never a crash or an over-read.
#include "engine/step/step_plan_wire.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>

namespace tpserve {
namespace {

using ::testing::HasSubstr;

StepPlan Example() {
  StepPlan plan;
  plan.step_id = 1234567890123;
  SequencePlan decode{.sequence_id = -7, .tokens = {42}, .start_position = 511, .block_table = {3, 9, 27, 81},
                      .want_logits = true, .sampled_tokens = 17};
  decode.sampling = {.temperature = 0.7f, .top_k = 40, .top_p = 0.95f, .seed = 0xfedcba9876543210ull,
                     .min_tokens = 3, .ignore_eos = true, .logprobs = 5, .stop_token_ids = {128001, 128009}};
  SequencePlan prefill{.sequence_id = 8, .tokens = {1, 2, 3, 4, 5}, .start_position = 0, .block_table = {0, 1},
                       .want_logits = false};
  plan.sequences = {decode, prefill, SequencePlan{.sequence_id = 9, .tokens = {}, .block_table = {}}};
  return plan;
}

void ExpectSame(const StepPlan& a, const StepPlan& b) {
  EXPECT_EQ(a.step_id, b.step_id);
  ASSERT_EQ(a.sequences.size(), b.sequences.size());
  for (size_t i = 0; i < a.sequences.size(); ++i) {
    const SequencePlan &x = a.sequences[i], &y = b.sequences[i];
    EXPECT_EQ(x.sequence_id, y.sequence_id);
    EXPECT_EQ(x.tokens, y.tokens);
    EXPECT_EQ(x.start_position, y.start_position);
    EXPECT_EQ(x.block_table, y.block_table);
    EXPECT_EQ(x.want_logits, y.want_logits);
    EXPECT_EQ(x.sampled_tokens, y.sampled_tokens);
    EXPECT_EQ(x.sampling.temperature, y.sampling.temperature);
    EXPECT_EQ(x.sampling.top_k, y.sampling.top_k);
    EXPECT_EQ(x.sampling.top_p, y.sampling.top_p);
    EXPECT_EQ(x.sampling.seed, y.sampling.seed);
    EXPECT_EQ(x.sampling.min_tokens, y.sampling.min_tokens);
    EXPECT_EQ(x.sampling.ignore_eos, y.sampling.ignore_eos);
    EXPECT_EQ(x.sampling.logprobs, y.sampling.logprobs);
    EXPECT_EQ(x.sampling.stop_token_ids, y.sampling.stop_token_ids);
  }
}

TEST(StepPlanWire, EveryFieldSurvivesTheRoundTrip) {
  std::vector<uint8_t> bytes;
  EncodeStepPlan(Example(), &bytes);
  auto decoded = DecodeStepPlan(bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  ExpectSame(Example(), *decoded);
  EncodeStepPlan(StepPlan{}, &bytes);  // an empty plan, in a reused buffer
  ASSERT_TRUE(DecodeStepPlan(bytes).ok());
  EXPECT_TRUE(DecodeStepPlan(bytes)->sequences.empty());
}

TEST(StepPlanWire, EveryTruncationIsAnErrorNamingWhereItEnded) {
  std::vector<uint8_t> bytes;
  EncodeStepPlan(Example(), &bytes);
  for (size_t length = 0; length < bytes.size(); ++length) {
    auto decoded = DecodeStepPlan(std::span<const uint8_t>(bytes.data(), length));
    ASSERT_FALSE(decoded.ok()) << "length " << length;
    if (length >= 6) {
      EXPECT_THAT(decoded.status().message(),
                  ::testing::AnyOf(HasSubstr("ends inside"), HasSubstr("more than it holds")))
          << "length " << length;
    }
  }
  bytes.push_back(0);
  EXPECT_THAT(DecodeStepPlan(bytes).status().message(), HasSubstr("1 bytes past its end"));
}

TEST(StepPlanWire, ForeignVersionsAndCorruptionAreRefused) {
  std::vector<uint8_t> bytes;
  EncodeStepPlan(Example(), &bytes);
  std::vector<uint8_t> bad = bytes;
  bad[0] ^= 0xff;
  EXPECT_THAT(DecodeStepPlan(bad).status().message(), HasSubstr("bad magic"));
  bad = bytes;
  bad[4] = 99;
  EXPECT_THAT(DecodeStepPlan(bad).status().message(), HasSubstr("wire version 99"));
  bad = bytes;
  std::memset(bad.data() + 14, 0xff, 4);  // the sequence count
  EXPECT_THAT(DecodeStepPlan(bad).status().message(), HasSubstr("more than it holds"));
  // Random corruption anywhere: an error or a plan, never a crash (ASan and UBSan watch this).
  std::mt19937 rng(5);
  for (int trial = 0; trial < 2000; ++trial) {
    bad = bytes;
    for (int flips = 0; flips < 3; ++flips) bad[rng() % bad.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
    (void)DecodeStepPlan(bad);
  }
}

}  // namespace
}  // namespace tpserve
