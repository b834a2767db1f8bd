#include "comm/cost_model.h"

#include <gtest/gtest.h>

namespace tpserve {
namespace {

// nccl-tests' doc/PERFORMANCE.md factors, by hand: AllReduce 2(n-1)/n, AllGather and
// ReduceScatter (n-1)/n, Broadcast 1.
TEST(CostModel, BusBandwidthFactors) {
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Collective::kAllReduce, 2), 1.0);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Collective::kAllReduce, 8), 1.75);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Collective::kAllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Collective::kReduceScatter, 8), 0.875);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Collective::kBroadcast, 8), 1.0);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Collective::kAllReduce, 1), 0.0);
}

TEST(CostModel, FitRecoversAlphaAndBetaFromSyntheticData) {
  // 8 ranks AllReduce, α = 25 µs, β = 360 GB/s: the NCCL-on-H100 ballpark of ANCHORS.md.
  const double alpha = 25e-6, beta = 360e9, f = BusBandwidthFactor(Collective::kAllReduce, 8);
  std::vector<std::pair<double, double>> samples;
  for (double bytes = 8; bytes <= 1 << 30; bytes *= 4) samples.emplace_back(bytes, alpha + bytes * f / beta);
  auto fit = FitAlphaBeta(samples, f);
  ASSERT_TRUE(fit.ok());
  EXPECT_NEAR(fit->alpha_s, alpha, 1e-9);
  EXPECT_NEAR(fit->beta_bytes_per_s / beta, 1.0, 1e-6);
  EXPECT_NEAR(fit->crossover_bytes, alpha * beta / f, 1.0);  // ~5.1 MB
  // Noise of ±5% on every point still lands near the truth.
  for (size_t i = 0; i < samples.size(); ++i) samples[i].second *= (i % 2 ? 1.05 : 0.95);
  fit = FitAlphaBeta(samples, f);
  ASSERT_TRUE(fit.ok());
  EXPECT_NEAR(fit->alpha_s / alpha, 1.0, 0.1);
  EXPECT_NEAR(fit->beta_bytes_per_s / beta, 1.0, 0.1);
  EXPECT_FALSE(FitAlphaBeta({{8, 1e-6}}, f).ok());
}

}  // namespace
}  // namespace tpserve
