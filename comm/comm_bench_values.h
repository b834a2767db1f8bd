// The inputs bench-comm gives every rank and the sums a correct result holds, shared by the
// in-process sweep (comm_bench.cc) and its MPI peer (mpi_peer.cc) so both check the same thing:
// small integers, so every sum is exact in float and checking is exact.
#pragma once

#include <cstddef>

namespace tpserve {

inline float CommBenchInput(int rank, size_t i) {
  return static_cast<float>((rank + 1) * static_cast<int>(i % 7 + 1));
}

// Element i summed over ranks 0..ranks-1.
inline float CommBenchSum(int ranks, size_t i) {
  float sum = 0;
  for (int q = 0; q < ranks; ++q) sum += CommBenchInput(q, i);
  return sum;
}

}  // namespace tpserve
