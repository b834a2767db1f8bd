#include "engine/step/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <set>

#include "common/splitmix64.h"
#include "tests/engine/step/reference_softmax.h"

namespace tpserve {
namespace {

// A sequence's draws in order (draw 0, 1, 2, ...), as the engine makes them step by step.
class Sampler {
 public:
  explicit Sampler(uint64_t seed) : seed_(seed) {}
  SampledToken Sample(std::span<const float> logits, SamplingParams params, std::span<const int32_t> banned = {}) {
    params.seed = seed_;
    return SampleToken(logits, params, banned, draws_++);
  }

 private:
  uint64_t seed_;
  uint64_t draws_ = 0;
};

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

// Greedy over a Llama-3-sized vocabulary (16-id lanes and a tail) against a plain scan: the first
// id of the largest non-NaN logit that is not banned. Ties across lanes, a maximum in the tail,
// a tie between the lanes and the tail, NaNs, a banned maximum.
TEST(Sampler, GreedyOverALargeVocabularyPicksTheFirstLargestLogit) {
  const int vocab = 128256 + 7;  // 7 ids past the last full 16
  std::mt19937 random(5);
  std::normal_distribution<float> normal;
  std::vector<float> logits(vocab);
  for (float& l : logits) l = normal(random);
  auto plain_scan = [&](const std::vector<int32_t>& banned) {
    int best = -1;
    for (int id = 0; id < vocab; ++id) {
      if (std::isnan(logits[id]) || std::find(banned.begin(), banned.end(), id) != banned.end()) continue;
      if (best < 0 || logits[id] > logits[best]) best = id;
    }
    return best;
  };
  struct Case {
    const char* name;
    std::vector<std::pair<int, float>> set;
    std::vector<int32_t> banned;
  };
  const std::vector<Case> cases = {
      {"random", {}, {}},
      {"tie across lanes: the lower id", {{70001, 9.0f}, {5003, 9.0f}}, {}},
      {"tie in one lane: the lower id", {{160, 9.0f}, {32, 9.0f}}, {}},
      {"maximum in the tail", {{vocab - 2, 9.0f}}, {}},
      {"tie between a lane and the tail", {{vocab - 1, 9.0f}, {100000, 9.0f}}, {}},
      {"NaNs never win", {{17, std::nanf("")}, {vocab - 3, std::nanf("")}, {900, 8.0f}}, {}},
      {"+inf wins", {{4242, INFINITY}}, {}},
      {"banned maximum", {{1234, 9.0f}, {99, 8.5f}}, {1234}},
  };
  Sampler sampler(1);
  for (const Case& c : cases) {
    const std::vector<float> saved = logits;
    for (const auto& [id, value] : c.set) logits[id] = value;
    EXPECT_EQ(sampler.Sample(logits, {}, c.banned).id, plain_scan(c.banned)) << c.name;
    logits = saved;
  }
  std::vector<float> all_minus_inf(vocab, -INFINITY);
  EXPECT_EQ(sampler.Sample(all_minus_inf, {}).id, 0);
}

// Each instruction set's search against a plain scan, on the cases above without bans.
TEST(Sampler, EverySimdPathFindsTheFirstLargestLogit) {
  const int vocab = 4096 + 9;
  std::mt19937 random(8);
  std::normal_distribution<float> normal;
  for (SimdPath path : {SimdPath::kPortable, SimdPath::kAvx2, SimdPath::kAvx512}) {
    if (!SimdPathAvailable(path)) {
      std::printf("skipped: argmax path %d needs an instruction set this CPU lacks\n", static_cast<int>(path));
      continue;
    }
    for (int trial = 0; trial < 50; ++trial) {
      std::vector<float> logits(vocab);
      for (float& l : logits) l = normal(random);
      const int a = static_cast<int>(random() % vocab), b = static_cast<int>(random() % vocab);
      logits[a] = logits[b] = 7.0f;  // a tie: the lower id
      if (trial % 3 == 0) logits[random() % vocab] = std::nanf("");
      int want = -1;
      for (int id = 0; id < vocab; ++id) {
        if (!std::isnan(logits[id]) && (want < 0 || logits[id] > logits[want])) want = id;
      }
      ASSERT_EQ(FirstLargestLogit(logits, path), want) << "path " << static_cast<int>(path) << " trial " << trial;
    }
    std::vector<float> none_above(vocab, -INFINITY);
    none_above[5] = std::nanf("");
    EXPECT_EQ(FirstLargestLogit(none_above, path), -1);
  }
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

// The log-probability of `id` under softmax(logits / T), in long double from the definition:
// log p = (l_id - max) / T - log(sum_j exp((l_j - max) / T)). -inf means "impossible".
long double LogSoftmaxAt(const std::vector<float>& logits, double temperature, int id) {
  long double max = -INFINITY;
  for (float l : logits) max = std::max<long double>(max, l);
  long double z = 0;
  for (float l : logits) z += std::exp((static_cast<long double>(l) - max) / temperature);
  return (static_cast<long double>(logits[id]) - max) / temperature - std::log(z);
}

// Issue 9: logit / T overflowed float for T ~ 1e-38 (inf - inf = NaN), and the draw fell through
// to the last vocabulary id. Every finite temperature must draw a token the softmax allows, and
// temperatures below kGreedyTemperature must be greedy.
TEST(Sampler, EveryFiniteTemperatureDrawsATokenTheSoftmaxAllows) {
  // Logits as large as a real model's, over a vocabulary whose last id has a low logit.
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = 40.0f * std::sin(0.37f * i) + 0.01f * i;
  logits.back() = -50.0f;
  const int greedy = Sampler(0).Sample(logits, {}).id;
  for (int exponent = -45; exponent <= 3; ++exponent) {
    for (float mantissa : {1.0f, 3.0f}) {
      const float temperature = mantissa * std::pow(10.0f, static_cast<float>(exponent));
      if (!(temperature > 0) || std::isinf(temperature)) continue;  // 1e-46 rounds to 0
      for (SamplingParams params : {SamplingParams{.temperature = temperature},
                                    SamplingParams{.temperature = temperature, .top_k = 50},
                                    SamplingParams{.temperature = temperature, .top_p = 0.9f}}) {
        Sampler sampler(7);
        for (int draw = 0; draw < 8; ++draw) {
          const int id = sampler.Sample(logits, params).id;
          ASSERT_GE(id, 0);
          ASSERT_LT(id, static_cast<int>(logits.size()));
          EXPECT_TRUE(std::isfinite(LogSoftmaxAt(logits, temperature, id)))
              << "T=" << temperature << " drew id " << id << ", which the softmax gives probability 0";
          if (temperature < kGreedyTemperature) {
            EXPECT_EQ(id, greedy) << "T=" << temperature;
          }
        }
      }
    }
  }
}

TEST(Sampler, NonFiniteLogitsNeverWinADraw) {
  std::vector<float> logits = kLogits;
  logits[3] = std::nanf("");
  logits[7] = -INFINITY;
  Sampler sampler(3);
  for (int i = 0; i < 2000; ++i) {
    const int id = sampler.Sample(logits, {.temperature = 1.0f}).id;
    EXPECT_NE(id, 3);
    EXPECT_NE(id, 7);
  }
}

TEST(Sampler, ValidationNamesTheFieldAndRefusesNonFiniteTemperatures) {
  EXPECT_TRUE(ValidateSamplingParams({.temperature = 1e-38f}, "sampling.").ok());
  EXPECT_TRUE(ValidateSamplingParams({.temperature = 3e38f}, "sampling.").ok());
  for (float bad : {-1.0f, std::nanf(""), INFINITY}) {
    Status status = ValidateSamplingParams({.temperature = bad}, "sampling.");
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("sampling.temperature"), std::string::npos) << status.message();
  }
  EXPECT_NE(ValidateSamplingParams({.top_p = 0.0f}, "x.").message().find("x.top_p"), std::string::npos);
  EXPECT_NE(ValidateSamplingParams({.top_k = -1}, "x.").message().find("x.top_k"), std::string::npos);
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

// `vocab` logits drawn from N(0, sigma²).
std::vector<float> NormalRow(int vocab, float sigma, std::mt19937& random) {
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> logits(vocab);
  for (float& l : logits) l = normal(random);
  return logits;
}

// The sampler's semantics from their definition, in float64, sorting the whole vocabulary: weights
// exp((logit - max) / T) (0 for NaN, banned, and below exp(-87)); without top-k and top-p the ids
// in id order, else by descending logit (lower id first), cut to the top k, then to the smallest
// prefix whose probability reaches top_p. For each candidate of the kept prefix, the interval of
// [0, 1) where a draw's uniform picks it.
struct ReferenceDraws {
  std::vector<int32_t> candidates;
  std::vector<double> upper;  // candidate i is picked for uniform in [upper[i - 1], upper[i])

  explicit ReferenceDraws(const std::vector<float>& logits, const SamplingParams& params,
                          const std::vector<int32_t>& banned = {}) {
    const int vocab = static_cast<int>(logits.size());
    const std::vector<double> weight =
        testing::ReferenceSoftmaxWeights(logits, params.temperature, banned).weight;
    for (int id = 0; id < vocab; ++id) {
      if (weight[id] > 0) candidates.push_back(id);
    }
    double total = 0;
    for (int32_t id : candidates) total += weight[id];
    if (params.top_k > 0 || params.top_p < 1.0f) {
      std::stable_sort(candidates.begin(), candidates.end(),
                       [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
      if (params.top_k > 0 && candidates.size() > static_cast<size_t>(params.top_k)) {
        candidates.resize(params.top_k);
        total = 0;
        for (int32_t id : candidates) total += weight[id];
      }
      double cumulative = 0;
      for (size_t i = 0; i < candidates.size(); ++i) {
        cumulative += weight[candidates[i]] / total;
        if (cumulative >= params.top_p) {
          candidates.resize(i + 1);
          break;
        }
      }
    }
    double kept = 0;
    for (int32_t id : candidates) kept += weight[id];
    double running = 0;
    for (int32_t id : candidates) upper.push_back((running += weight[id]) / kept);
  }
  // Where `id` is picked: [low, high) of the uniform, or nothing if it is not a candidate.
  bool Interval(int32_t id, double* low, double* high) const {
    const auto at = std::find(candidates.begin(), candidates.end(), id);
    if (at == candidates.end()) return false;
    const size_t i = at - candidates.begin();
    *low = i == 0 ? 0.0 : upper[i - 1];
    *high = upper[i];
    return true;
  }
};

// Draws over a Llama-3-sized vocabulary against the float64 reference above: every drawn id is one
// the reference keeps, at the reference's place for the draw's uniform to within 1e-6 (the sampler
// weighs in float: exp's 1e-7, sums in other orders), and nearly every draw is the reference's own.
TEST(Sampler, LargeVocabularyDrawsMatchAFloat64Reference) {
  const int vocab = 128256;
  std::mt19937 random(21);
  std::vector<float> peaked = NormalRow(vocab, 2.5f, random);
  for (int i = 0; i < 20; ++i) peaked[random() % vocab] += 12.0f;
  const std::vector<float> flat = NormalRow(vocab, 0.25f, random);
  std::vector<float> quantized = NormalRow(vocab, 2.5f, random);
  for (float& l : quantized) l = std::round(l);  // many ties
  std::vector<float> non_finite = peaked;
  for (int i = 0; i < 50; ++i) non_finite[random() % vocab] = i % 2 ? std::nanf("") : -INFINITY;
  const std::vector<int32_t> banned = {128001, 128008, 128009, 0, 4};
  struct Case {
    const char* name;
    const std::vector<float>* logits;
    SamplingParams params;
    std::vector<int32_t> banned;
  };
  const std::vector<Case> cases = {
      {"peaked T=1", &peaked, {.temperature = 1.0f}, {}},
      {"peaked T=0.6 top_p=0.9", &peaked, {.temperature = 0.6f, .top_p = 0.9f}, {}},
      {"peaked T=1.5 top_p=0.95", &peaked, {.temperature = 1.5f, .top_p = 0.95f}, {}},
      {"peaked T=0.8 top_k=40", &peaked, {.temperature = 0.8f, .top_k = 40}, {}},
      {"peaked T=1 top_k=5000 top_p=0.5",
       &peaked,
       {.temperature = 1.0f, .top_k = 5000, .top_p = 0.5f},
       {}},
      {"flat T=1", &flat, {.temperature = 1.0f}, {}},
      {"flat T=1 top_p=0.99", &flat, {.temperature = 1.0f, .top_p = 0.99f}, {}},
      {"flat T=1 top_k=3000", &flat, {.temperature = 1.0f, .top_k = 3000}, {}},
      {"quantized T=1 top_k=7", &quantized, {.temperature = 1.0f, .top_k = 7}, {}},
      {"quantized T=0.3 top_p=0.8", &quantized, {.temperature = 0.3f, .top_p = 0.8f}, {}},
      {"non-finite, banned T=1", &non_finite, {.temperature = 1.0f}, banned},
      {"non-finite, banned top_p=0.7", &non_finite, {.temperature = 0.9f, .top_p = 0.7f}, banned},
  };
  for (const Case& c : cases) {
    SamplingParams params = c.params;
    params.seed = 77;
    const ReferenceDraws reference(*c.logits, params, c.banned);
    // A nucleus of thousands of ids is sorted on every draw: fewer of those.
    const bool sorted_large = params.top_p < 1.0f && reference.candidates.size() > 2000;
    const int draws = sorted_large ? 20 : 120;
    int same = 0;
    for (int draw = 0; draw < draws; ++draw) {
      const int32_t id = SampleToken(*c.logits, params, c.banned, draw).id;
      const double uniform = static_cast<double>(SplitMix64At(params.seed, draw) >> 11) * 0x1.0p-53;
      double low, high;
      ASSERT_TRUE(reference.Interval(id, &low, &high))
          << c.name << ": drew " << id << ", which the reference never keeps";
      EXPECT_GE(uniform, low - 1e-6) << c.name << " draw " << draw << " id " << id;
      EXPECT_LT(uniform, high + 1e-6) << c.name << " draw " << draw << " id " << id;
      same += uniform >= low && uniform < high;
    }
    EXPECT_GE(same, draws - draws / 50) << c.name;
  }
}

// Logprobs over a Llama-3-sized vocabulary: the top ids by descending logit (lower id first), each
// with its log-softmax from the definition in long double.
TEST(Sampler, LargeVocabularyLogprobsMatchTheDefinition) {
  const int vocab = 128256;
  std::mt19937 random(31);
  std::vector<float> logits = NormalRow(vocab, 2.5f, random);
  logits[9000] = logits[9001] = 14.0f;  // a tie at the top: the lower id first
  std::vector<int32_t> by_logit(vocab);
  for (int id = 0; id < vocab; ++id) by_logit[id] = id;
  std::stable_sort(by_logit.begin(), by_logit.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  for (int n : {1, 5, 20}) {
    const SampledToken token =
        SampleToken(logits, {.temperature = 0.7f, .seed = 3, .logprobs = n}, {}, 0);
    ASSERT_EQ(token.top.size(), static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(token.top[i].id, by_logit[i]) << "rank " << i;
      EXPECT_NEAR(token.top[i].logprob,
                  static_cast<double>(LogSoftmaxAt(logits, 1.0, token.top[i].id)), 1e-5);
    }
    EXPECT_NEAR(token.logprob, static_cast<double>(LogSoftmaxAt(logits, 1.0, token.id)), 1e-5);
  }
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
