#include "kernels/cpu/memory_bandwidth.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/huge_page_allocator.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/stream_prefetch.h"
#include "kernels/cpu/thread_pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tpserve::cpu {
namespace {

std::atomic<uint64_t> g_read_sink{0};  // every checksum lands here, so no read is optimized away

// The bytes folded into a checksum (the loads must happen); integer adds, so no data can hit
// a floating-point slow path. The page starts are prefetched ahead as Linear's kernels do
// (stream_prefetch.h): the fastest read of a stream measured here, 1.16-1.52x the hardware
// prefetcher alone on an AMD EPYC (Zen 5), so the ceiling is not one the kernels beat.
#if defined(__x86_64__)
__attribute__((target("avx512f"))) uint64_t ChecksumAvx512(const uint8_t* p, size_t n) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 256 <= n; i += 256) {
    PrefetchPageStartsAhead(p + i, 256);
    a0 = _mm512_add_epi64(a0, _mm512_loadu_si512(p + i));
    a1 = _mm512_add_epi64(a1, _mm512_loadu_si512(p + i + 64));
    a2 = _mm512_add_epi64(a2, _mm512_loadu_si512(p + i + 128));
    a3 = _mm512_add_epi64(a3, _mm512_loadu_si512(p + i + 192));
  }
  uint64_t tail = 0;
  for (; i < n; ++i) tail += p[i];
  return tail + _mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
}

__attribute__((target("avx2"))) uint64_t ChecksumAvx2(const uint8_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    PrefetchPageStartsAhead(p + i, 128);
    a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  uint64_t tail = 0;
  for (; i < n; ++i) tail += p[i];
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                     _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
  return tail + lanes[0] + lanes[1] + lanes[2] + lanes[3];
}
#endif

uint64_t Checksum(const uint8_t* p, size_t n) {
#if defined(__x86_64__)
  if (HasAvx512F()) return ChecksumAvx512(p, n);
  if (HasAvx2Fma()) return ChecksumAvx2(p, n);
#endif
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    PrefetchPageStartsAhead(p + i, 32);
    uint64_t words[4];
    std::memcpy(words, p + i, sizeof(words));
    s0 += words[0];
    s1 += words[1];
    s2 += words[2];
    s3 += words[3];
  }
  for (; i < n; ++i) s0 += p[i];
  return s0 + s1 + s2 + s3;
}

}  // namespace

BandwidthResult MeasureMemoryBandwidth(size_t bytes, int repeats, ThreadPool* pool) {
  const size_t count = bytes / sizeof(float);
  HugePageBuffer<float> source(count), destination(count);
  // Touch every page first (and give the pages distinct contents).
  pool->ParallelFor(count, 4096, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) source[i] = static_cast<float>(i & 1023);
    std::memset(destination.data() + b, 0, (e - b) * sizeof(float));
  });
  std::vector<double> read_s, copy_s;
  for (int r = 0; r < std::max(1, repeats); ++r) {
    read_s.push_back(TimeRead(source.data(), count * sizeof(float), pool));
    const auto start = std::chrono::steady_clock::now();
    pool->ParallelFor(count, 4096, [&](size_t b, size_t e) {
      std::memcpy(destination.data() + b, source.data() + b, (e - b) * sizeof(float));
    });
    copy_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  const double gb = static_cast<double>(count * sizeof(float)) / 1e9;
  return {gb / *std::min_element(read_s.begin(), read_s.end()),
          gb / *std::min_element(copy_s.begin(), copy_s.end()), count * sizeof(float)};
}

double TimeRead(const void* data, size_t bytes, ThreadPool* pool) {
  const auto* p = static_cast<const uint8_t*>(data);
  const auto start = std::chrono::steady_clock::now();
  // Whole 16 KiB pieces, split as Linear splits a matrix's rows (ThreadPool::ParallelForBalanced,
  // kBalancedChunkBytes): a core slower than the other slows the ceiling as much as the kernels.
  pool->ParallelForBalanced(bytes, 16384, kBalancedChunkBytes, [&](int, size_t b, size_t e) {
    g_read_sink.fetch_add(Checksum(p + b, e - b), std::memory_order_relaxed);
  });
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

PairedRead::PairedRead(size_t bytes, int threads)
    : buffer_(bytes), pool_(std::make_unique<ThreadPool>(threads, 0)) {
  pool_->ParallelFor(bytes, 16384, [&](size_t b, size_t e) {  // first touch on the reading threads
    for (size_t i = b; i < e; ++i) buffer_[i] = static_cast<uint8_t>(i * 131);
  });
}

PairedRead::~PairedRead() = default;

double PairedRead::Seconds() {
  return TimeRead(buffer_.data(), buffer_.size(), pool_.get());
}

}  // namespace tpserve::cpu
