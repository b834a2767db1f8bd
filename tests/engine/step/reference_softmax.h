// The sampler's weights from their definition, in float64, for the tests that check the vector
// code (softmax_weights.h) and the draws made from it: exp((logit - max) / T), 0 for NaN, banned
// and -inf logits and for exponents below -87 (float's normal range, where the sampler stops).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace tpserve::testing {

struct ReferenceWeights {
  std::vector<double> weight;    // [vocab]
  std::vector<double> exponent;  // [vocab] (logit - max) / T; -inf where excluded
  double max = -INFINITY;        // over the ids not banned, NaN skipped
};

inline ReferenceWeights ReferenceSoftmaxWeights(const std::vector<float>& logits, double temperature,
                                                const std::vector<int32_t>& banned) {
  ReferenceWeights r;
  auto excluded = [&](int id) {
    return std::isnan(logits[id]) || std::find(banned.begin(), banned.end(), id) != banned.end();
  };
  for (size_t id = 0; id < logits.size(); ++id) {
    if (!excluded(static_cast<int>(id))) r.max = std::max<double>(r.max, logits[id]);
  }
  for (size_t id = 0; id < logits.size(); ++id) {
    const double e = excluded(static_cast<int>(id)) ? -INFINITY : (logits[id] - r.max) / temperature;
    r.exponent.push_back(std::isnan(e) ? -INFINITY : e);
    r.weight.push_back(e >= -87.0 ? std::exp(e) : 0.0);
  }
  return r;
}

}  // namespace tpserve::testing
