// Measures how fast this machine streams memory into the cores: the ceiling of weight-streaming
// decode (every step reads every weight once). Used by benchmarks, in the same run as what they
// measure, with the same threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/huge_page_allocator.h"

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
// the pool's threads (TimeRead's split, as Linear splits weight rows).
BandwidthResult MeasureMemoryBandwidth(size_t bytes, int repeats, ThreadPool* pool);

// Seconds to read `bytes` at `data` once with the pool's threads, each its own contiguous slice
// but for chunks a faster thread takes over from a slower one, as Linear splits weight rows
// (kBalancedChunkBytes): what a weight-streaming kernel cannot beat on those bytes, fork and
// join included.
double TimeRead(const void* data, size_t bytes, ThreadPool* pool);

// A buffer of weight-sized bytes read on demand: the ceiling measured next to each timed call of
// what it bounds, so that a shared machine's slow moments slow both sides of the ratio (the best
// of a separate run, as BandwidthResult reports, is taken in whatever moment was quietest).
class PairedRead {
 public:
  // `threads` as the measured code uses; the pool does not spin between reads.
  PairedRead(size_t bytes, int threads);
  ~PairedRead();
  PairedRead(const PairedRead&) = delete;
  PairedRead& operator=(const PairedRead&) = delete;

  double Seconds();  // one read of the whole buffer

 private:
  HugePageBuffer<uint8_t> buffer_;
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace tpserve::cpu
