// GreedyLinear against a scan of Linear's own outputs (Linear itself is checked against float64 in
// cpu_ops_test.cc): the same id for every token, with bans, near ties, exact ties and a winner the
// hi halves alone would miss.
#include "kernels/cpu/greedy_linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "kernels/cpu/thread_pool.h"

namespace tpserve::cpu {
namespace {

struct Problem {
  int tokens = 0, in = 0, out = 0;
  std::vector<uint16_t> w;  // [out, in] row-major bf16
  std::vector<float> x;     // [tokens, in]
  std::vector<int32_t> banned_offsets{0}, banned_ids;
};

// The first largest finite output not banned, from Linear's outputs.
std::vector<int32_t> ScanOfLinear(const Problem& p, const std::vector<uint16_t>& arranged,
                                  WeightLayout layout, LinearKernel kernel) {
  std::vector<float> y(static_cast<size_t>(p.tokens) * p.out);
  Linear({.x = p.x.data(),
          .w = arranged.data(),
          .y = y.data(),
          .tokens = p.tokens,
          .in = p.in,
          .out = p.out,
          .layout = layout},
         nullptr, kernel);
  std::vector<int32_t> ids(p.tokens, -1);
  for (int t = 0; t < p.tokens; ++t) {
    const auto bans_begin = p.banned_ids.begin() + p.banned_offsets[t];
    const auto bans_end = p.banned_ids.begin() + p.banned_offsets[t + 1];
    for (int o = 0; o < p.out; ++o) {
      const float v = y[static_cast<size_t>(t) * p.out + o];
      if (std::find(bans_begin, bans_end, o) != bans_end || !std::isfinite(v)) continue;
      if (ids[t] < 0 || v > y[static_cast<size_t>(t) * p.out + ids[t]]) ids[t] = o;
    }
  }
  return ids;
}

// Every kernel that runs here: GreedyLinear's ids are the scan's, and where it screens it settles
// every token.
void ExpectScanOfLinear(const Problem& p, int64_t* candidates = nullptr) {
  for (LinearKernel kernel : kLinearKernels) {
    if (!LinearKernelAvailable(kernel)) continue;
    const WeightLayout layout = PreferredLayout(kernel, p.in);
    std::vector<uint16_t> arranged = p.w;
    ArrangeWeights(arranged.data(), p.out, p.in, layout);
    const RowNorms norms = RowNormBounds(arranged.data(), p.out, p.in, layout, nullptr);
    ThreadPool pool(2);
    std::vector<int32_t> ids(p.tokens, -2);
    GreedyLinearStats stats;
    GreedyLinear({.x = p.x.data(),
                  .w = arranged.data(),
                  .tokens = p.tokens,
                  .in = p.in,
                  .out = p.out,
                  .layout = layout,
                  .norms = &norms,
                  .banned_offsets = p.banned_offsets.data(),
                  .banned_ids = p.banned_ids.data()},
                 &pool, kernel, ids.data(), &stats);
    EXPECT_EQ(ids, ScanOfLinear(p, arranged, layout, kernel)) << LinearKernelName(kernel);
    if (GreedyLinearScreens(kernel, layout)) {
      EXPECT_EQ(stats.unsettled_tokens, 0) << LinearKernelName(kernel);
      if (candidates != nullptr) *candidates = stats.candidates;
    }
  }
}

Problem RandomProblem(int tokens, int in, int out, uint32_t seed) {
  Problem p{.tokens = tokens, .in = in, .out = out};
  std::mt19937 random(seed);
  std::normal_distribution<float> normal;
  p.w.resize(static_cast<size_t>(out) * in);
  for (auto& v : p.w) v = F32ToBF16(normal(random) * 0.05f);
  p.x.resize(static_cast<size_t>(tokens) * in);
  for (auto& v : p.x) v = normal(random);
  for (int t = 0; t < tokens; ++t) p.banned_offsets.push_back(0);
  return p;
}

// Random weights and activations, each shape's tokens spanning the exact pass's paths (one pass,
// chunks, whole groups) and the screen's passes of eight; out with and without a row-major tail.
TEST(GreedyLinear, IsTheFirstLargestOfLinearsOutputs) {
  for (int tokens : {1, 3, 8, 9, 37}) {
    for (int in : {64, 768}) {
      for (int out : {2048, 1000}) {
        SCOPED_TRACE(std::to_string(tokens) + " tokens, in " + std::to_string(in) + ", out " +
                     std::to_string(out));
        ExpectScanOfLinear(RandomProblem(tokens, in, out, tokens * 7 + in + out));
      }
    }
  }
}

// Some tokens ban their winner and a few others (ascending ids, as the engine gives them): the
// next largest not banned.
TEST(GreedyLinear, SkipsBannedIds) {
  Problem p = RandomProblem(8, 768, 2080, 11);
  const Problem unbanned = p;
  std::vector<uint16_t> arranged = p.w;
  const std::vector<int32_t> winners =
      ScanOfLinear(unbanned, arranged, WeightLayout::kRowMajor, LinearKernel::kPortable);
  p.banned_offsets = {0};
  for (int t = 0; t < p.tokens; ++t) {
    if (t % 2 == 0) {
      std::vector<int32_t> bans = {0, winners[t], 2079};
      std::sort(bans.begin(), bans.end());
      bans.erase(std::unique(bans.begin(), bans.end()), bans.end());
      p.banned_ids.insert(p.banned_ids.end(), bans.begin(), bans.end());
    }
    p.banned_offsets.push_back(static_cast<int32_t>(p.banned_ids.size()));
  }
  ExpectScanOfLinear(p);
}

// Positive activations; rows 40 and 90 share every weight (0.25) but two (w[40][j] = 1, w[90][i] =
// 1) and dominate the others; x[i] = 1 + 2⁻⁹ and x[j] = 1 + 2⁻¹⁰ both have hi = 1 (bf16 keeps 7
// bits), so on the hi halves the two rows tie and the first, 40, would win, while the exact outputs
// differ by 2⁻¹⁰ and 90 wins. Row 130 is row 90 exactly: a tie that the lower id, 90, takes. Row
// 1500 (in the second pool member's rows) is row 40 with one weight one bf16 step lower. So the
// candidates are several, and only the exact pass tells them apart.
TEST(GreedyLinear, SettlesNearTiesThatTheHiHalvesCannot) {
  Problem p = RandomProblem(3, 768, 2048, 5);
  const int in = p.in, i = 17, j = 300;
  for (auto& v : p.w) v = F32ToBF16(BF16ToF32(v) * 0.02f);
  for (auto& v : p.x) v = std::abs(v);
  for (int k = 0; k < in; ++k) {
    const float shared = k == i || k == j ? 0.0f : 0.25f;
    for (int row : {40, 90, 130, 1500}) p.w[static_cast<size_t>(row) * in + k] = F32ToBF16(shared);
  }
  p.w[40 * in + j] = F32ToBF16(1.0f);
  p.w[90 * in + i] = F32ToBF16(1.0f);
  p.w[130 * in + i] = F32ToBF16(1.0f);
  p.w[1500 * in + j] = F32ToBF16(1.0f);
  p.w[1500 * in + 5] = static_cast<uint16_t>(p.w[1500 * in + 5] - 1);  // 0.25 - one step
  for (int t = 0; t < p.tokens; ++t) {
    p.x[t * in + i] = 1.0f + 0x1p-9f;
    p.x[t * in + j] = 1.0f + 0x1p-10f;
  }
  std::vector<uint16_t> row_major = p.w;
  const std::vector<int32_t> expected(3, 90);
  ASSERT_EQ(ScanOfLinear(p, row_major, WeightLayout::kRowMajor, LinearKernel::kPortable), expected);
  int64_t candidates = -1;
  ExpectScanOfLinear(p, &candidates);
  if (candidates >= 0) {
    EXPECT_GE(candidates, 3 * 4) << "every token's four near-equal rows";
  }
}

// An activation that is not finite: no id (the caller computes the logits), whatever the kernel.
TEST(GreedyLinear, LeavesNonFiniteActivationsToTheCaller) {
  for (float bad : {INFINITY, NAN}) {
    Problem p = RandomProblem(2, 768, 64, 3);
    p.x[100] = bad;
    for (LinearKernel kernel : kLinearKernels) {
      if (!LinearKernelAvailable(kernel)) continue;
      const WeightLayout layout = PreferredLayout(kernel, p.in);
      std::vector<uint16_t> arranged = p.w;
      ArrangeWeights(arranged.data(), p.out, p.in, layout);
      const RowNorms norms = RowNormBounds(arranged.data(), p.out, p.in, layout, nullptr);
      std::vector<int32_t> ids(2, -2);
      GreedyLinear({.x = p.x.data(),
                    .w = arranged.data(),
                    .tokens = 2,
                    .in = p.in,
                    .out = p.out,
                    .layout = layout,
                    .norms = &norms},
                   nullptr, kernel, ids.data());
      EXPECT_EQ(ids[0], -1) << LinearKernelName(kernel) << " " << bad;
      EXPECT_GE(ids[1], 0) << LinearKernelName(kernel) << " " << bad;
    }
  }
}

// Each bound at least its row's float64 norm, and within a millionth of it; in every layout.
TEST(RowNormBounds, BoundEachRowsNormTightly) {
  const Problem p = RandomProblem(1, 768, 100, 9);
  for (WeightLayout layout :
       {WeightLayout::kRowMajor, WeightLayout::kPairGroups, WeightLayout::kAmxTiles}) {
    std::vector<uint16_t> arranged = p.w;
    ArrangeWeights(arranged.data(), p.out, p.in, layout);
    ThreadPool pool(2);
    const RowNorms norms = RowNormBounds(arranged.data(), p.out, p.in, layout, &pool);
    double largest = 0;
    for (int o = 0; o < p.out; ++o) {
      double sum = 0;
      for (int k = 0; k < p.in; ++k) {
        const double v = BF16ToF32(p.w[static_cast<size_t>(o) * p.in + k]);
        sum += v * v;
      }
      const double norm = std::sqrt(sum);
      largest = std::max(largest, norm);
      EXPECT_GE(norms.bounds[o], norm) << o;
      EXPECT_LE(norms.bounds[o], norm * (1 + 1e-6)) << o;
    }
    EXPECT_GE(norms.largest, largest);
  }
}

}  // namespace
}  // namespace tpserve::cpu
