// When an open-loop load test sends each request: a seeded Poisson process (exponential gaps at
// `rate` requests/s), or gamma-distributed gaps with shape `burstiness` (1: Poisson; < 1:
// burstier; > 1: more regular), the same mean rate either way — vllm bench serve's convention.
#pragma once

#include <cstdint>
#include <vector>

namespace tpserve {

// Send times in seconds from the start, non-decreasing, `count` of them.
std::vector<double> ArrivalTimes(double rate, int count, uint64_t seed, double burstiness = 1.0);

}  // namespace tpserve
