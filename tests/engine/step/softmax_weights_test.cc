#include "engine/step/softmax_weights.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "tests/engine/step/reference_softmax.h"

namespace tpserve {
namespace {

constexpr int kVocab = 128256 + 5;  // Llama 3's, and a partial last vector

std::vector<float> PeakedLogits(uint32_t seed) {  // an LLM's: a broad spread and a few far above it
  std::mt19937 random(seed);
  std::normal_distribution<float> normal(0.0f, 2.5f);
  std::vector<float> logits(kVocab);
  for (float& l : logits) l = normal(random);
  for (int i = 0; i < 20; ++i) logits[random() % kVocab] += 12.0f;
  return logits;
}

using testing::ReferenceSoftmaxWeights;
using testing::ReferenceWeights;

TEST(SoftmaxWeights, MatchFloat64OnEveryPath) {
  std::vector<float> logits = PeakedLogits(1);
  logits[11] = std::nanf("");
  logits[12] = -INFINITY;
  logits[kVocab - 1] = 1e30f;   // the maximum, in the partial last vector
  logits[kVocab - 2] = -1e30f;  // weight 0
  const std::vector<int32_t> banned = {100, 5000, -3,
                                       kVocab + 9};  // two outside the vocabulary: ignored
  for (SimdPath path : {SimdPath::kPortable, SimdPath::kAvx2, SimdPath::kAvx512}) {
    if (!SimdPathAvailable(path)) {
      std::printf("skipped: SIMD path %d needs an instruction set this CPU lacks\n",
                  static_cast<int>(path));
      continue;
    }
    for (float temperature : {1e-5f, 0.7f, 1.0f, 3e5f}) {
      for (bool with_bans : {false, true}) {
        // With the 1e30 logit every other weight is 0; without it, the peaked row.
        for (bool huge : {false, true}) {
          std::vector<float> row = logits;
          if (!huge) row[kVocab - 1] = 0.5f;
          const std::vector<int32_t> bans = with_bans ? banned : std::vector<int32_t>{};
          SoftmaxWeights w;
          ComputeSoftmaxWeights(row, temperature, bans, &w, path);
          const ReferenceWeights ref = ReferenceSoftmaxWeights(row, temperature, bans);
          const std::string where = "path " + std::to_string(static_cast<int>(path)) +
                                    " T=" + std::to_string(temperature) +
                                    (with_bans ? " banned" : "") + (huge ? " 1e30" : "");
          ASSERT_EQ(w.max_logit, static_cast<float>(ref.max)) << where;
          ASSERT_EQ(w.weight.size(), row.size());
          double total = 0;
          int worst = -1;  // the id furthest outside the bound (one assertion, not one per id)
          double worst_excess = 0;
          for (int id = 0; id < kVocab; ++id) {
            total += ref.weight[id];
            if (std::abs(ref.exponent[id] + 87.0) < 1e-3) continue;  // at the cutoff: either side
            // The exponent is computed in float: ~6e-8 of it, up to 87, then exp's own 1e-7.
            const double excess = std::abs(w.weight[id] - ref.weight[id]) - 1e-5 * ref.weight[id];
            if (excess > worst_excess) {
              worst_excess = excess;
              worst = id;
            }
          }
          ASSERT_EQ(worst, -1) << where << ": id " << worst << " weighs " << w.weight[worst]
                               << ", float64 " << ref.weight[worst];
          EXPECT_NEAR(w.total, total, 1e-5 * total) << where;
          double blocks = 0;
          for (double b : w.block_sums) blocks += b;
          EXPECT_EQ(blocks, w.total) << where;  // the same sums, in block order
          ASSERT_EQ(w.block_sums.size(),
                    (row.size() + SoftmaxWeights::kBlock - 1) / SoftmaxWeights::kBlock);
        }
      }
    }
  }
  // Nothing left above -inf: every weight 0.
  SoftmaxWeights w;
  ComputeSoftmaxWeights(std::vector<float>(40, -INFINITY), 1.0f, {}, &w);
  EXPECT_EQ(w.max_logit, -INFINITY);
  EXPECT_EQ(w.total, 0.0);
}

// The whole order the sampler's top-k and top-p walk: ids of nonzero weight by descending logit,
// lower id first on ties.
std::vector<int32_t> FullOrder(const std::vector<float>& logits, const SoftmaxWeights& w) {
  std::vector<int32_t> ids;
  for (size_t id = 0; id < logits.size(); ++id) {
    if (w.weight[id] > 0) ids.push_back(static_cast<int32_t>(id));
  }
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  return ids;
}

TEST(SoftmaxWeights, LeadingIdsAreThePrefixOfTheWholeOrderThatHoldsWhatIsAsked) {
  struct Row {
    const char* name;
    std::vector<float> logits;
    float temperature;
  };
  std::vector<Row> rows;
  rows.push_back({"peaked", PeakedLogits(2), 0.8f});
  {
    std::mt19937 random(3);
    std::normal_distribution<float> normal(0.0f, 0.3f);
    std::vector<float> flat(kVocab);
    for (float& l : flat) l = normal(random);
    rows.push_back({"flat", flat, 1.0f});
  }
  {
    // Weights at 2^-k (logits -k ln 2 at T = 1), each shared by thousands of ids: the octaves'
    // edges, and ties across them.
    std::vector<float> edges(kVocab);
    for (int id = 0; id < kVocab; ++id) edges[id] = -static_cast<float>(id % 40) * 0.6931472f;
    rows.push_back({"octave edges and ties", edges, 1.0f});
  }
  rows.push_back({"one id of weight",
                  [] {
                    std::vector<float> one(kVocab, -1e4f);
                    one[777] = 3.0f;
                    return one;
                  }(),
                  1.0f});
  rows.push_back({"all equal", std::vector<float>(kVocab, 1.5f), 1.0f});
  for (const Row& row : rows) {
    SoftmaxWeights w;
    ComputeSoftmaxWeights(row.logits, row.temperature, {}, &w);
    const std::vector<int32_t> order = FullOrder(row.logits, w);
    for (size_t count : {size_t{0}, size_t{1}, size_t{5}, size_t{1000}, order.size() + 1}) {
      for (double fraction : {0.0, 0.5, 0.9, 0.999, 2.0}) {
        const std::vector<int32_t> ids = LeadingIds(row.logits, w, count, fraction * w.total);
        const std::string where = std::string(row.name) + " count " + std::to_string(count) +
                                  " mass " + std::to_string(fraction);
        ASSERT_LE(ids.size(), order.size()) << where;
        ASSERT_TRUE(std::equal(ids.begin(), ids.end(), order.begin()))
            << where << ": not the order's prefix";
        double mass = 0;
        for (int32_t id : ids) mass += w.weight[id];
        if (ids.size() < order.size()) {  // cut short: it holds what was asked
          EXPECT_GE(ids.size(), count) << where;
          EXPECT_GE(mass, fraction * w.total) << where;
        }
      }
    }
  }
}

TEST(SoftmaxWeights, IdAtInIdOrderLaysTheWeightsEndToEnd) {
  // Weights that sum exactly (multiples of 1/4), with empty blocks and a block boundary inside.
  const int vocab = 3 * SoftmaxWeights::kBlock + 10;
  SoftmaxWeights w;
  w.weight.assign(vocab, 0.0f);
  w.weight[5] = 1.0f;
  w.weight[SoftmaxWeights::kBlock - 1] = 0.25f;     // the last id of block 0
  w.weight[SoftmaxWeights::kBlock] = 0.5f;          // the first of block 1
  w.weight[3 * SoftmaxWeights::kBlock + 7] = 2.0f;  // block 2 empty; the partial block 3
  w.block_sums = {1.25, 0.5, 0.0, 2.0};
  w.total = 3.75;
  auto plain_walk = [&](double u) {  // the first id whose running sum passes u
    double sum = 0;
    for (int id = 0; id < vocab; ++id) {
      sum += w.weight[id];
      if (u < sum) return id;
    }
    return -1;
  };
  for (double u = 0; u < w.total; u += 0.125)
    EXPECT_EQ(IdAtInIdOrder(w, u), plain_walk(u)) << "u " << u;
  EXPECT_EQ(IdAtInIdOrder(w, w.total),
            3 * SoftmaxWeights::kBlock + 7);  // past the end: the last weighted id
  EXPECT_EQ(IdAtInIdOrder(w, 1e9), 3 * SoftmaxWeights::kBlock + 7);
  w.weight.assign(vocab, 0.0f);
  w.block_sums.assign(4, 0.0);
  w.total = 0;
  EXPECT_EQ(IdAtInIdOrder(w, 0.0), -1);
}

}  // namespace
}  // namespace tpserve
