// How fast the current GPU streams its memory into the SMs: the floor of weight-streaming decode
// (every step reads every weight once), measured in the same run as what it bounds. No CUDA headers.
#pragma once

#include <cstddef>

#include "common/status.h"

namespace tpserve::cuda {

// Reads a buffer of `bytes` (≥ 4 GiB keeps caches out of it) `repeats` times with a read-only
// kernel (16-byte non-caching loads); the median in 1e9 bytes/s.
Result<double> MeasureReadBandwidth(size_t bytes, int repeats);

}  // namespace tpserve::cuda
