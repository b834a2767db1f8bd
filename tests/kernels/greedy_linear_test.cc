// GreedyLinear against a scan of Linear's own outputs (Linear itself is checked against float64 in
// cpu_ops_test.cc): the same id for every token, with bans, near ties, exact ties and a winner the
// hi halves alone would miss.
#include "kernels/cpu/greedy_linear.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
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
// p's weights rearranged into `layout`.
std::vector<uint16_t> Arranged(const Problem& p, WeightLayout layout) {
  std::vector<uint16_t> arranged = p.w;
  ArrangeWeights(arranged.data(), p.out, p.in, layout);
  return arranged;
}

// GreedyLinear's ids for p (its bans included), on its weights in `layout` (Arranged) and their
// row norms.
std::vector<int32_t> GreedyIds(const Problem& p, const std::vector<uint16_t>& arranged,
                               WeightLayout layout, LinearKernel kernel, ThreadPool* pool,
                               GreedyLinearStats* stats = nullptr) {
  const RowNorms norms = RowNormBounds(arranged.data(), p.out, p.in, layout, nullptr);
  std::vector<int32_t> ids(p.tokens, -2);
  GreedyLinear({.x = p.x.data(),
                .w = arranged.data(),
                .tokens = p.tokens,
                .in = p.in,
                .out = p.out,
                .layout = layout,
                .norms = &norms,
                .banned_offsets = p.banned_offsets.data(),
                .banned_ids = p.banned_ids.data()},
               pool, kernel, ids.data(), stats);
  return ids;
}

void ExpectScanOfLinear(const Problem& p, int64_t* candidates = nullptr) {
  for (LinearKernel kernel : kLinearKernels) {
    if (!LinearKernelAvailable(kernel)) continue;
    const WeightLayout layout = PreferredLayout(kernel, p.in);
    const std::vector<uint16_t> arranged = Arranged(p, layout);
    ThreadPool pool(2);
    GreedyLinearStats stats;
    const std::vector<int32_t> ids = GreedyIds(p, arranged, layout, kernel, &pool, &stats);
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
  const std::vector<int32_t> winners =
      ScanOfLinear(p, p.w, WeightLayout::kRowMajor, LinearKernel::kPortable);  // before the bans
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
  const std::vector<int32_t> expected(3, 90);
  ASSERT_EQ(ScanOfLinear(p, p.w, WeightLayout::kRowMajor, LinearKernel::kPortable), expected);
  int64_t candidates = -1;
  ExpectScanOfLinear(p, &candidates);
  if (candidates >= 0) {
    EXPECT_GE(candidates, 3 * 4) << "every token's four near-equal rows";
  }
}

// Activations over ten decades (each element 10^±2 of a scale 10^±3), every 40th row a copy of one
// row with a few weights one bf16 step off and the activations signed to favour it, so each token
// keeps ~14 near-equal candidates: every token settled, and the scan's id. (1,200 such tokens
// were run once: 0 mismatches.)
TEST(GreedyLinear, SettlesNearDuplicatesAtExtremeScales) {
  if (!LinearKernelAvailable(LinearKernel::kAvx512Bf16))
    GTEST_SKIP() << "avx512bf16 (the kernel that screens) does not run here";
  std::mt19937 random(123);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> uniform(-1, 1);
  for (int trial = 0; trial < 24; ++trial) {
    const int in = std::array{64, 768, 2048}[trial % 3];
    const int out =
        512 + 32 * (trial % 5) + (trial % 7 == 0 ? 7 : 0);  // some with a row-major tail
    Problem p = RandomProblem(4, in, out, 1000 + trial);
    std::vector<float> base(in);
    for (auto& v : base) v = normal(random);
    const float scale = std::pow(10.0f, 3 * uniform(random));
    for (int t = 0; t < p.tokens; ++t) {
      for (int k = 0; k < in; ++k) {
        const float magnitude =
            std::abs(normal(random)) * std::pow(10.0f, 2 * uniform(random)) * scale;
        p.x[t * in + k] = std::copysign(magnitude, base[k]) * (random() % 4 == 0 ? -1 : 1);
      }
    }
    for (int o = 0; o < out; ++o) {
      const float row_scale = 0.05f * std::pow(10.0f, 0.5f * uniform(random));
      for (int k = 0; k < in; ++k) {
        uint16_t& v = p.w[static_cast<size_t>(o) * in + k];
        if (o % 40 != 0) {
          v = F32ToBF16(normal(random) * row_scale);
        } else {
          v = F32ToBF16(base[k]);
          if (random() % (trial % 2 ? 50 : 400) == 0)
            v = static_cast<uint16_t>(v + random() % 3 - 1);
        }
      }
    }
    SCOPED_TRACE("trial " + std::to_string(trial));
    ExpectScanOfLinear(p);
  }
}

// Where Cauchy-Schwarz is tight: the lo halves are (nearly) proportional to row A, so W[A]·lo is
// |W[A]|₂ |lo|₂, and h (the hi halves) is made almost orthogonal to row A. Row B = α·h has a tiny
// norm, so its bound is tiny, and α puts its exact output 3% of W[A]·lo below row A's. On the hi
// halves row B leads by 97% of row A's bound; checked below in float64, a bound 5% short of
// |W[A]|₂ |lo|₂ would prune row A and take row B: the bound cannot be much less than it is.
TEST(GreedyLinear, KeepsTheWinnerWhereTheBoundIsTight) {
  if (!LinearKernelAvailable(LinearKernel::kAvx512Bf16))
    GTEST_SKIP() << "avx512bf16 (the kernel that screens) does not run here";
  const int in = 768, out = 256, row_a = 200, row_b = 37;
  Problem p = RandomProblem(1, in, out, 77);
  for (auto& v : p.w) v = F32ToBF16(BF16ToF32(v) * 1e-5f);  // the other rows: far below
  std::mt19937 random(78);
  std::normal_distribution<float> normal;
  std::vector<double> w_a(in), h(in), x(in);
  double largest_w = 0;
  for (int k = 0; k < in; ++k) {
    p.w[row_a * in + k] = F32ToBF16(0.05f * normal(random));
    w_a[k] = BF16ToF32(p.w[row_a * in + k]);
    largest_w = std::max(largest_w, std::abs(w_a[k]));
    h[k] =
        BF16ToF32(F32ToBF16(0.5f + std::abs(normal(random))));  // bf16 in [0.5, ...): ulp >= 2^-8
  }
  // Signs flipped greedily, the largest products first: h almost orthogonal to row A (|W[A]·h| at
  // most the smallest product).
  std::vector<int> order(in);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int l, int r) { return std::abs(w_a[l] * h[l]) > std::abs(w_a[r] * h[r]); });
  double s_h = 0;
  for (int k : order) {
    if (std::abs(s_h - w_a[k] * h[k]) < std::abs(s_h + w_a[k] * h[k])) h[k] = -h[k];
    s_h += w_a[k] * h[k];
  }
  const double lo_scale = 0x1p-11 / largest_w;  // |lo| < 2^-11 <= a quarter of h's ulp: hi = h
  double lo_norm2 = 0, w_a_norm2 = 0, w_a_lo = 0;
  for (int k = 0; k < in; ++k) {
    p.x[k] = static_cast<float>(h[k] + lo_scale * w_a[k]);
    x[k] = p.x[k];
    const double lo = BF16ToF32(F32ToBF16(static_cast<float>(x[k] - h[k])));
    lo_norm2 += lo * lo;
    w_a_norm2 += w_a[k] * w_a[k];
    w_a_lo += w_a[k] * lo;
  }
  const double bound_a = std::sqrt(w_a_norm2 * lo_norm2);  // ~ W[A]·lo
  double y_a = 0;
  for (int k = 0; k < in; ++k) y_a += w_a[k] * x[k];
  // Row B = bf16(α h) with its float64 output 3% of W[A]·lo below row A's (bisection on α).
  auto row_b_output = [&](double alpha, bool store) {
    double y = 0;
    for (int k = 0; k < in; ++k) {
      const uint16_t v = F32ToBF16(static_cast<float>(alpha * h[k]));
      if (store) p.w[row_b * in + k] = v;
      y += BF16ToF32(v) * x[k];
    }
    return y;
  };
  double low = 0, high = 1;
  for (int i = 0; i < 200; ++i) {
    const double mid = (low + high) / 2;
    (row_b_output(mid, false) < y_a - 0.03 * w_a_lo ? low : high) = mid;
  }
  row_b_output(low, true);
  double screened_a = 0, screened_b = 0, w_b_norm2 = 0;
  for (int k = 0; k < in; ++k) {
    const double w_b = BF16ToF32(p.w[row_b * in + k]);
    screened_a += w_a[k] * h[k];
    screened_b += w_b * h[k];
    w_b_norm2 += w_b * w_b;
  }
  const double bound_b = std::sqrt(w_b_norm2 * lo_norm2);
  ASSERT_GT(w_a_lo, 0.99 * bound_a) << "lo is not proportional to row A";
  ASSERT_LT(screened_a + 0.95 * bound_a, screened_b - bound_b)
      << "a 5% smaller bound would keep row A";
  ASSERT_EQ(ScanOfLinear(p, Arranged(p, WeightLayout::kPairGroups), WeightLayout::kPairGroups,
                         LinearKernel::kAvx512Bf16),
            std::vector<int32_t>{row_a});
  ExpectScanOfLinear(p);
}

// An activation that is not finite: no id (the caller computes the logits), whatever the kernel.
TEST(GreedyLinear, LeavesNonFiniteActivationsToTheCaller) {
  for (float bad : {INFINITY, NAN}) {
    Problem p = RandomProblem(2, 768, 64, 3);
    p.x[100] = bad;
    for (LinearKernel kernel : kLinearKernels) {
      if (!LinearKernelAvailable(kernel)) continue;
      const WeightLayout layout = PreferredLayout(kernel, p.in);
      const std::vector<int32_t> ids = GreedyIds(p, Arranged(p, layout), layout, kernel, nullptr);
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
    const std::vector<uint16_t> arranged = Arranged(p, layout);
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
