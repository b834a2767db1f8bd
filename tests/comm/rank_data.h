// Deterministic per-rank test data for the collective tests: values in [-1000, 1000), different for
// each (rank, count, call), so a collective that mixes up ranks or calls gives the wrong answer.
#pragma once

#include <cstddef>
#include <random>
#include <vector>

namespace tpserve::testing {

inline std::vector<float> RankData(int rank, size_t count, int call) {
  std::mt19937 random(rank * 7919 + call * 104729 + static_cast<int>(count));
  std::uniform_real_distribution<float> uniform(-1e3f, 1e3f);
  std::vector<float> v(count);
  for (auto& x : v) x = uniform(random);
  return v;
}

}  // namespace tpserve::testing
