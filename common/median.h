// The median the benchmarks and trace summaries report: the upper middle element (no
// interpolation), 0 for an empty set.
#pragma once

#include <algorithm>
#include <vector>

namespace tpserve {

inline double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace tpserve
