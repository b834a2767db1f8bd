// Software prefetch of a forward stream of bytes (a weight matrix, the DRAM ceiling's read), into
// L2 (T1: on an AMD EPYC (Zen 5) the weights fetched into L1 ran 5-10 points of the paired read
// below T1), kStreamPrefetchBytes ahead, in one of two patterns:
// - kPageStarts, for a stream read once at memory speed (one token's pass, except AVX2's, which
//   ran faster with kEveryLine: dot::Table; the ceiling's read):
//   the first two 64-byte lines of each 4 KiB page and nothing else. The hardware prefetcher
//   streams within a page but stops at its end; two early lines of the next pages restart it
//   before the loads get there. On an AMD EPYC (Zen 5) one token's pass over the LM head read at
//   90% of a plain read with every line prefetched, at 108-111% with the page starts alone, and a
//   plain read with them at 1.16-1.52x one without (4 KiB to 32 KiB ahead all alike; every other
//   line, or one or four lines a page, slower: docs/PERFORMANCE.md).
// - kEveryLine, for weights that several passes (or tokens) read from cache: every line, and the
//   page starts kEveryLinePageStartsBytes ahead. There the hardware prefetcher sees the passes'
//   cache hits, not a stream (with page starts alone batch 8 ran 1.6-1.8x slower), and one core
//   fetched 26-29 GB/s with the lines alone; the page starts further ahead restart the hardware
//   prefetcher ahead of the lines. bench-decode on an AMD EPYC (Zen 5), against the lines alone:
//   batch 2-8 1.09-1.31x with the AVX2 and AVX-512 row kernels, batch 2-4 1.08-1.36x with AVX-512
//   BF16 (its batch 8, compute-bound, and every batch 1 unchanged; docs/PERFORMANCE.md,
//   session 27).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/x86_intrinsics.h"

namespace tpserve::cpu {

constexpr size_t kStreamPrefetchBytes = 16384;
constexpr size_t kEveryLinePageStartsBytes = 32768;
constexpr uintptr_t kPageBytes = 4096;

enum class StreamPrefetch { kPageStarts, kEveryLine };

// PREFETCHT1 as a volatile asm statement, for the page starts: GCC 12 dropped an _mm_prefetch
// page-start branch from a loop it had unswitched on the pattern (a prefetch has no effect the
// language sees), and the AVX2 kernel then measured "page starts" that were no prefetch at all.
inline void PrefetchT1(const void* p) {
#if defined(__x86_64__)
  asm volatile("prefetcht1 %0" : : "m"(*static_cast<const char*>(p)));
#else
  (void)p;
#endif
}

// The line kStreamPrefetchBytes past p.
inline void PrefetchLineAhead(const void* p) {
#if defined(__x86_64__)
  _mm_prefetch(static_cast<const char*>(p) + kStreamPrefetchBytes, _MM_HINT_T1);
#else
  (void)p;
#endif
}

// Called once per loop iteration that reads [p, p + window) of the stream (window <= 4 KiB): if
// the same window `distance` bytes ahead holds the start of a page, that page's first two lines
// are prefetched into L2.
inline void PrefetchPageStartsAhead(const void* p, size_t window,
                                    size_t distance = kStreamPrefetchBytes) {
#if defined(__x86_64__)
  const uintptr_t ahead = reinterpret_cast<uintptr_t>(p) + distance;
  const uintptr_t page = (ahead + kPageBytes - 1) & ~(kPageBytes - 1);
  if (page < ahead + window) {
    PrefetchT1(reinterpret_cast<const char*>(page));
    PrefetchT1(reinterpret_cast<const char*>(page + 64));
  }
#else
  (void)p;
  (void)window;
  (void)distance;
#endif
}

// Called once per loop iteration that reads [p, p + window) of the stream (window a multiple of 64
// bytes).
inline void PrefetchAhead(const void* p, size_t window, StreamPrefetch pattern) {
  if (pattern == StreamPrefetch::kPageStarts) {
    PrefetchPageStartsAhead(p, window);
  } else {
    for (size_t line = 0; line < window; line += 64) PrefetchLineAhead(static_cast<const char*>(p) + line);
    PrefetchPageStartsAhead(p, window, kEveryLinePageStartsBytes);
  }
}

}  // namespace tpserve::cpu
