#include "kernels/cpu/memory_bandwidth.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/huge_page_allocator.h"
#include "kernels/cpu/thread_pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tpserve::cpu {
namespace {

#if defined(__x86_64__)
__attribute__((target("avx512f"))) float SumAvx512(const float* p, size_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_loadu_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_loadu_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_loadu_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_loadu_ps(p + i + 48));
  }
  float tail = 0;
  for (; i < n; ++i) tail += p[i];
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
  for (float v : lanes) tail += v;
  return tail;
}
#endif

float Sum(const float* p, size_t n) {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) return SumAvx512(p, n);
#endif
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += p[i];
    s1 += p[i + 1];
    s2 += p[i + 2];
    s3 += p[i + 3];
  }
  for (; i < n; ++i) s0 += p[i];
  return s0 + s1 + s2 + s3;
}

// `count` floats of the kind of pages the weights live in, left uninitialized: the caller's first
// touch writes every one (a std::vector would zero them first, another pass over 2 GB).
class HugePageFloats {
 public:
  explicit HugePageFloats(size_t count) : count_(count), data_(HugePageAllocator<float>().allocate(count)) {}
  ~HugePageFloats() { HugePageAllocator<float>().deallocate(data_, count_); }
  HugePageFloats(const HugePageFloats&) = delete;
  HugePageFloats& operator=(const HugePageFloats&) = delete;
  float* data() { return data_; }
  float& operator[](size_t i) { return data_[i]; }

 private:
  size_t count_;
  float* data_;
};

}  // namespace

BandwidthResult MeasureMemoryBandwidth(size_t bytes, int repeats, ThreadPool* pool) {
  const size_t count = bytes / sizeof(float);
  HugePageFloats source(count), destination(count);
  // Touch every page first (and give the pages distinct contents).
  pool->ParallelFor(count, 4096, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) source[i] = static_cast<float>(i & 1023);
    std::memset(destination.data() + b, 0, (e - b) * sizeof(float));
  });
  std::atomic<float> sink{0};
  std::vector<double> read_s, copy_s;
  for (int r = 0; r < std::max(1, repeats); ++r) {
    auto start = std::chrono::steady_clock::now();
    pool->ParallelFor(count, 4096, [&](size_t b, size_t e) {
      const float s = Sum(source.data() + b, e - b);
      float old = sink.load();
      while (!sink.compare_exchange_weak(old, old + s)) {
      }
    });
    read_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    start = std::chrono::steady_clock::now();
    pool->ParallelFor(count, 4096, [&](size_t b, size_t e) {
      std::memcpy(destination.data() + b, source.data() + b, (e - b) * sizeof(float));
    });
    copy_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  const double gb = static_cast<double>(count * sizeof(float)) / 1e9;
  return {gb / *std::min_element(read_s.begin(), read_s.end()),
          gb / *std::min_element(copy_s.begin(), copy_s.end()), count * sizeof(float)};
}

}  // namespace tpserve::cpu
