#include "kernels/cpu/compute_peak.h"

#include <atomic>
#include <chrono>
#include <vector>

#include "common/median.h"
#include "kernels/cpu/linear_dot.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/x86_intrinsics.h"

namespace tpserve::cpu {
namespace {

#if defined(__x86_64__)
// 12 independent accumulator chains (more than latency x throughput on any AVX512_BF16 core), each
// instruction 32 bf16 multiplies and 32 adds into 16 f32 lanes.
constexpr int kChains = 12;
constexpr long kIterations = 2'000'000;

__attribute__((target("avx512f,avx512bw,avx512bf16"))) float Bf16Loop(long iterations) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
  const __m512bh a = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3f80));  // 1.0
  const __m512bh b = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3c00));  // 2^-7
  for (long i = 0; i < iterations; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
    __asm__ volatile("" : "+v"(acc[0]), "+v"(acc[1]), "+v"(acc[2]), "+v"(acc[3]));  // keep the loop
  }
  __m512 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
  return _mm512_reduce_add_ps(sum);
}
#endif

}  // namespace

double MeasureBf16PeakGflops(ThreadPool* pool) {
#if defined(__x86_64__)
  if (!dot::HasAvx512Bf16()) return 0;
  const size_t threads = static_cast<size_t>(pool->size());
  std::vector<double> samples;
  std::atomic<float> sink{0};
  for (int repeat = 0; repeat < 5; ++repeat) {
    const auto start = std::chrono::steady_clock::now();
    pool->ParallelFor(threads, 1, [&](size_t begin, size_t end) {
      for (size_t t = begin; t < end; ++t) sink = sink + Bf16Loop(kIterations);
    });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    samples.push_back(static_cast<double>(threads) * kIterations * kChains * 64 / seconds * 1e-9);
  }
  return Median(samples);
#else
  (void)pool;
  return 0;
#endif
}

}  // namespace tpserve::cpu
