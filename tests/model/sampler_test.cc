#include "model/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

namespace tpserve {
namespace {

const std::vector<float> kLogits = {1.0f, 2.5f, 0.3f, -1.0f, 2.0f, 0.0f, 1.7f, -0.5f, 0.9f, 1.2f};

std::vector<double> Softmax(const std::vector<float>& logits, double temperature) {
  std::vector<double> p(logits.size());
  double z = 0;
  for (size_t i = 0; i < logits.size(); ++i) z += (p[i] = std::exp(logits[i] / temperature));
  for (double& v : p) v /= z;
  return p;
}

TEST(Sampler, GreedyPicksArgmaxAndHonoursBans) {
  Sampler sampler(1);
  EXPECT_EQ(sampler.Sample(kLogits, {}).id, 1);
  const std::vector<int32_t> banned = {1};
  EXPECT_EQ(sampler.Sample(kLogits, {}, banned).id, 4);
}

TEST(Sampler, SeedsReproduceAndDiverge) {
  SamplingParams params{.temperature = 1.0f};
  auto draw = [&](uint64_t seed) {
    Sampler sampler(seed);
    std::vector<int32_t> ids;
    for (int i = 0; i < 64; ++i) ids.push_back(sampler.Sample(kLogits, params).id);
    return ids;
  };
  EXPECT_EQ(draw(11), draw(11));
  EXPECT_NE(draw(11), draw(12));
}

// Pearson's chi-square at a fixed seed: 9 degrees of freedom, critical value 27.88 at p = 0.001.
TEST(Sampler, TemperatureOneFollowsTheSoftmax) {
  for (float temperature : {1.0f, 0.7f}) {
    Sampler sampler(2024);
    SamplingParams params{.temperature = temperature};
    const int draws = 20000;
    std::vector<int> counts(kLogits.size(), 0);
    for (int i = 0; i < draws; ++i) ++counts[sampler.Sample(kLogits, params).id];
    const auto p = Softmax(kLogits, temperature);
    double chi2 = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      const double expected = draws * p[i];
      chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
    }
    EXPECT_LT(chi2, 27.88) << "temperature " << temperature;
  }
}

TEST(Sampler, TopKAndTopPNeverPickExcludedTokens) {
  Sampler sampler(5);
  std::set<int32_t> seen;
  for (int i = 0; i < 3000; ++i) seen.insert(sampler.Sample(kLogits, {.temperature = 1.0f, .top_k = 3}).id);
  EXPECT_EQ(seen, (std::set<int32_t>{1, 4, 6}));
  // Probabilities at T=1: id 1 0.330, id 4 0.200 (cumulative 0.531), id 6 0.149 (0.679), ...
  // The nucleus is the smallest prefix reaching top_p.
  seen.clear();
  for (int i = 0; i < 3000; ++i) seen.insert(sampler.Sample(kLogits, {.temperature = 1.0f, .top_p = 0.5f}).id);
  EXPECT_EQ(seen, (std::set<int32_t>{1, 4}));
  seen.clear();
  for (int i = 0; i < 3000; ++i) seen.insert(sampler.Sample(kLogits, {.temperature = 1.0f, .top_p = 0.6f}).id);
  EXPECT_EQ(seen, (std::set<int32_t>{1, 4, 6}));
  seen.clear();
  for (int i = 0; i < 3000; ++i) seen.insert(sampler.Sample(kLogits, {.temperature = 1.0f, .top_p = 0.2f}).id);
  EXPECT_EQ(seen, (std::set<int32_t>{1}));
}

TEST(Sampler, LogprobsAreLogSoftmaxOfRawLogits) {
  Sampler sampler(9);
  const auto p = Softmax(kLogits, 1.0);
  SampledToken token = sampler.Sample(kLogits, {.temperature = 0.5f, .top_k = 2, .logprobs = 3});
  EXPECT_NEAR(token.logprob, std::log(p[token.id]), 1e-5);  // not affected by temperature/top-k
  ASSERT_EQ(token.top.size(), 3u);
  EXPECT_EQ(token.top[0].id, 1);
  EXPECT_EQ(token.top[1].id, 4);
  EXPECT_EQ(token.top[2].id, 6);
  EXPECT_NEAR(token.top[2].logprob, std::log(p[6]), 1e-5);
}

TEST(Sampler, StopAndEosTokensAreBannedUntilMinTokens) {
  const std::vector<int> eos = {2, 3};
  SamplingParams params{.min_tokens = 4, .stop_token_ids = {9}};
  EXPECT_EQ(BannedTokens(params, eos, 3), (std::vector<int32_t>{9, 2, 3}));
  EXPECT_TRUE(BannedTokens(params, eos, 4).empty());
  params.ignore_eos = true;
  EXPECT_EQ(BannedTokens(params, eos, 0), (std::vector<int32_t>{9}));
  EXPECT_TRUE(IsStopToken(params, eos, 9));
  EXPECT_FALSE(IsStopToken(params, eos, 2));  // eos ignored
  params.ignore_eos = false;
  EXPECT_TRUE(IsStopToken(params, eos, 3));
  EXPECT_FALSE(IsStopToken(params, eos, 5));
}

}  // namespace
}  // namespace tpserve
