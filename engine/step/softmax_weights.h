// A row of logits as the sampler weighs it: softmax numerators in a few vector passes, and its
// most likely ids found without sorting the vocabulary. With 128k ids, sorting them all for top-p
// took 18 ms a row and exp in float64 1.3 ms (benchmarks/bench_sampler.cc), where a decode step
// of the default model takes 5-10 ms on two cores.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tpserve {

// The instruction set of the vector code here and in the sampler, for their tests: kBest is what
// this CPU runs; kAvx2 and kAvx512 run only where the CPU has them.
enum class SimdPath { kBest, kPortable, kAvx2, kAvx512 };
bool SimdPathAvailable(SimdPath path);

struct SoftmaxWeights {
  static constexpr int kBlock = 2048;  // ids per block

  // The largest logit not banned (NaN skipped).
  float max_logit = 0;
  // [vocab] exp((logit - max_logit) / temperature); 0 for NaN and banned ids, and below exp(-87)
  // (float's normal range). All 0 when max_logit is not finite.
  std::vector<float> weight;
  // [ceil(vocab / kBlock)] Σ weight over each block of ids, in float64; the largest weight there.
  std::vector<double> block_sums;
  std::vector<float> block_max;
  // Σ block_sums, in block order.
  double total = 0;
};

// Fills `out` (its buffers reused) for `logits` at `temperature` (at least 1e-30, so that its
// inverse is finite; the sampler's are at least kGreedyTemperature). `banned` ids (any outside
// [0, vocab) ignored) weigh 0. exp is Cephes' (relative error ~1e-7, kernels/cpu/simd16.h); the
// same row gives the same weights on every call in a process.
void ComputeSoftmaxWeights(std::span<const float> logits, float temperature,
                           std::span<const int32_t> banned, SoftmaxWeights* out,
                           SimdPath path = SimdPath::kBest);

// The ids of nonzero weight in descending logit order (ties: lower id first), cut short: at least
// `count` of them and at least enough for their weights to sum to `mass`, or all of them where
// there are fewer. They are the leading ids of the whole order: those in the fewest top buckets of
// weight (1/32 of an octave each) that hold enough, and one bucket more, sorted; the rest of the
// vocabulary is not.
std::vector<int32_t> LeadingIds(std::span<const float> logits, const SoftmaxWeights& weights,
                                size_t count, double mass);

// The id where `u` (in [0, total)) falls when the weights are laid end to end in id order; where
// rounding carries u past the end, the last id of nonzero weight. -1 if every weight is 0.
int32_t IdAtInIdOrder(const SoftmaxWeights& weights, double u);

}  // namespace tpserve
