// The one summation every communicator shares (comm/communicator.h's determinism contract):
// out[i] = ((chunk0[i] + chunk1[i]) + chunk2[i]) + ..., in float, chunk r at `chunks + r * stride`.
#pragma once

#include <cstddef>
#include <cstring>

namespace tpserve {

inline void SumChunksInRankOrder(const float* chunks, int num_chunks, size_t stride, size_t count, float* out) {
  if (count == 0) return;
  std::memcpy(out, chunks, count * sizeof(float));
  for (int r = 1; r < num_chunks; ++r) {
    const float* part = chunks + static_cast<size_t>(r) * stride;
    for (size_t i = 0; i < count; ++i) out[i] += part[i];
  }
}

}  // namespace tpserve
