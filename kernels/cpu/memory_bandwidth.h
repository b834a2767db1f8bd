// Measures how fast this machine streams memory into the cores: the ceiling of weight-streaming
// decode (every step reads every weight once). Used by benchmarks, in the same run as what they
// measure, with the same threads.
#pragma once

#include <cstddef>

namespace tpserve::cpu {

class ThreadPool;

struct BandwidthResult {
  // The best of the repeats, as STREAM reports its best rate: a ceiling is what the machine did at
  // least once in this run (a shared machine's neighbours only ever slow a repeat down).
  double read_gb_per_s = 0;    // 1e9 bytes/s
  double memcpy_gb_per_s = 0;  // bytes copied / s (each byte read once and written once)
  size_t buffer_bytes = 0;
};

// Reads a buffer of `bytes` (make it several times the last-level cache) `repeats` times with
// the pool's threads (each thread its own contiguous slice, as Linear splits weight rows).
BandwidthResult MeasureMemoryBandwidth(size_t bytes, int repeats, ThreadPool* pool);

}  // namespace tpserve::cpu
