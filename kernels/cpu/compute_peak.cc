#include "kernels/cpu/compute_peak.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

#include "common/huge_page_allocator.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/linear_dot.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/x86_intrinsics.h"

namespace tpserve::cpu {
namespace {

// Independent accumulator chains per loop: more than latency x issue rate (2 x 4 on the cores
// measured), all in registers (16 zmm or 12 ymm and the two operands). The loops are unrolled and
// the barrier sits on the operands, so the accumulators never go through memory: an earlier version
// kept them in a stack array (the barrier named four of them), and measured a third of the
// AVX-512 FMA rate on an AMD EPYC (Zen 5): 71-91 GFLOP/s a thread against 233.
constexpr int kChains512 = 16;
constexpr int kChains256 = 12;
constexpr long kIterations = 1'000'000;

#if defined(__x86_64__)
// Each instruction 32 bf16 multiplies and 32 adds into 16 f32 lanes.
__attribute__((target("avx512f,avx512bw,avx512bf16"))) float Bf16Loop(long iterations) {
  __m512 acc[kChains512];
  for (int c = 0; c < kChains512; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
  __m512i a_bits = _mm512_set1_epi16(0x3f80);  // 1.0
  __m512i b_bits = _mm512_set1_epi16(0x3c00);  // 2^-7
  for (long i = 0; i < iterations; ++i) {
    const __m512bh a = reinterpret_cast<__m512bh>(a_bits), b = reinterpret_cast<__m512bh>(b_bits);
#pragma GCC unroll 16
    for (int c = 0; c < kChains512; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
    // Operands the compiler cannot see through (as integer vectors: clang finds no register class
    // for a bf16 vector in an asm operand).
    __asm__ volatile("" : "+v"(a_bits), "+v"(b_bits));
  }
  __m512 sum = acc[0];
  for (int c = 1; c < kChains512; ++c) sum = _mm512_add_ps(sum, acc[c]);
  return _mm512_reduce_add_ps(sum);
}

// The same with f32 fused multiply-adds (16 lanes, a multiply and an add each).
__attribute__((target("avx512f"))) float Fma512Loop(long iterations) {
  __m512 acc[kChains512];
  for (int c = 0; c < kChains512; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
  __m512 a = _mm512_set1_ps(1.0f), b = _mm512_set1_ps(0x1p-7f);
  for (long i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int c = 0; c < kChains512; ++c) acc[c] = _mm512_fmadd_ps(a, b, acc[c]);
    __asm__ volatile("" : "+v"(a), "+v"(b));
  }
  __m512 sum = acc[0];
  for (int c = 1; c < kChains512; ++c) sum = _mm512_add_ps(sum, acc[c]);
  return _mm512_reduce_add_ps(sum);
}

// And with 8-lane AVX2 FMA, for CPUs without AVX-512 (16 ymm registers).
__attribute__((target("avx2,fma"))) float Fma256Loop(long iterations) {
  __m256 acc[kChains256];
  for (int c = 0; c < kChains256; ++c) acc[c] = _mm256_set1_ps(static_cast<float>(c));
  __m256 a = _mm256_set1_ps(1.0f), b = _mm256_set1_ps(0x1p-7f);
  for (long i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains256; ++c) acc[c] = _mm256_fmadd_ps(a, b, acc[c]);
    __asm__ volatile("" : "+x"(a), "+x"(b));
  }
  __m256 sum = acc[0];
  for (int c = 1; c < kChains256; ++c) sum = _mm256_add_ps(sum, acc[c]);
  float lanes[8];
  _mm256_storeu_ps(lanes, sum);
  return lanes[0];
}
// One thread's share of the streamed ceiling: [begin, end) read once, two lines (128 bytes) an
// iteration, each pair of lines feeding 4 x kTokens VDPBF16PS into 16 accumulators; `ahead` bytes
// ahead, every line prefetched into L2 (as the Linear kernels do: stream_prefetch.h).
template <int kTokens>
__attribute__((target("avx512f,avx512bw,avx512bf16"))) float StreamedBf16Loop(const char* begin, const char* end,
                                                                              size_t ahead) {
  constexpr int kPerPair = 4 * kTokens;
  __m512 acc[kChains512];
  for (int c = 0; c < kChains512; ++c) acc[c] = _mm512_setzero_ps();
  __m512i x_bits = _mm512_set1_epi16(0x3c00);  // 2^-7
  for (const char* p = begin; p + 128 <= end; p += 128) {
    _mm_prefetch(p + ahead, _MM_HINT_T1);
    _mm_prefetch(p + ahead + 64, _MM_HINT_T1);
    const __m512bh w0 = reinterpret_cast<__m512bh>(_mm512_load_si512(p));
    const __m512bh w1 = reinterpret_cast<__m512bh>(_mm512_load_si512(p + 64));
    __asm__ volatile("" : "+v"(x_bits));
    const __m512bh x = reinterpret_cast<__m512bh>(x_bits);
#pragma GCC unroll 128
    for (int i = 0; i < kPerPair; ++i) acc[i % kChains512] = _mm512_dpbf16_ps(acc[i % kChains512], i % 2 ? w1 : w0, x);
  }
  __m512 sum = acc[0];
  for (int c = 1; c < kChains512; ++c) sum = _mm512_add_ps(sum, acc[c]);
  return _mm512_reduce_add_ps(sum);
}

#endif

// The best GFLOP/s over `runs` runs of `per_thread(t)` on every member t of the pool at once, each
// run `flops` in all (a ceiling; neighbours only slow a run down). per_thread returns a value that
// is kept, so that its arithmetic cannot be dropped.
template <typename PerThread>
double BestGflops(ThreadPool* pool, int runs, double flops, PerThread per_thread) {
  std::atomic<float> sink{0};
  double best = 0;
  for (int run = 0; run < runs; ++run) {
    const auto start = std::chrono::steady_clock::now();
    pool->ParallelFor(static_cast<size_t>(pool->size()), 1, [&](size_t begin, size_t end) {
      for (size_t t = begin; t < end; ++t) sink = sink + per_thread(t);
    });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, flops / seconds * 1e-9);
  }
  return best;
}

// GFLOP/s of `loop` (kIterations x `chains` instructions of `flops_per_instruction` each) on every
// member of the pool at once: the best of 15 runs.
template <typename Loop>
double MeasurePeak(ThreadPool* pool, Loop loop, int chains, int flops_per_instruction) {
  const double flops = static_cast<double>(pool->size()) * kIterations * chains * flops_per_instruction;
  return BestGflops(pool, 15, flops, [&](size_t) { return loop(kIterations); });
}

#if defined(__x86_64__)
template <int kTokens>
double MeasureStreamed(ThreadPool* pool) {
  constexpr size_t kBytes = size_t{256} << 20;
  constexpr size_t kLines = kBytes / 128;  // 128-byte pairs of lines, as the loop takes them
  // Ones, not the constructor's zeros, so that the products are those of real weights.
  std::vector<uint16_t, HugePageAllocator<uint16_t>> weights(kBytes / sizeof(uint16_t));
  pool->ParallelFor(weights.size(), 1 << 16, [&](size_t begin, size_t end) {
    std::fill(weights.data() + begin, weights.data() + end, uint16_t{0x3f80});
  });
  const char* base = reinterpret_cast<const char*>(weights.data());
  // 4 x kTokens VDPBF16PS per 128 bytes, 64 FLOPs each.
  const double flops = static_cast<double>(kLines) * 4 * kTokens * 64;
  double best = 0;
  for (int repeat = 0; repeat < 5; ++repeat) {
    for (size_t ahead : {size_t{16384}, size_t{32768}}) {
      // Split as Linear splits a matrix (ThreadPool::ParallelForBalanced, kBalancedChunkBytes), so
      // that a core slower than the other slows this ceiling no more than it slows the kernels.
      std::atomic<float> sink{0};
      const auto start = std::chrono::steady_clock::now();
      pool->ParallelForBalanced(
          kLines, 1, kBalancedChunkBytes / 128, [&](int, size_t begin, size_t end) {
            sink = sink + StreamedBf16Loop<kTokens>(base + begin * 128, base + end * 128, ahead);
          });
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      best = std::max(best, flops / seconds * 1e-9);
    }
  }
  return best;
}
#endif

}  // namespace

double MeasureStreamedBf16Gflops(ThreadPool* pool, int tokens) {
#if defined(__x86_64__)
  if (!HasAvx512Bf16()) return 0;
  switch (tokens) {
    case 4: return MeasureStreamed<4>(pool);
    case 8: return MeasureStreamed<8>(pool);
    case 16: return MeasureStreamed<16>(pool);
    case 32: return MeasureStreamed<32>(pool);
    default: return 0;
  }
#else
  (void)pool;
  (void)tokens;
  return 0;
#endif
}

double MeasureBf16PeakGflops(ThreadPool* pool) {
#if defined(__x86_64__)
  if (!HasAvx512Bf16()) return 0;
  return MeasurePeak(pool, Bf16Loop, kChains512, 64);
#else
  (void)pool;
  return 0;
#endif
}

double MeasureF32FmaPeakGflops(ThreadPool* pool) {
#if defined(__x86_64__)
  if (HasAvx512F()) return MeasurePeak(pool, Fma512Loop, kChains512, 32);
  if (HasAvx2Fma()) return MeasurePeak(pool, Fma256Loop, kChains256, 16);
#endif
  (void)pool;
  return 0;
}

}  // namespace tpserve::cpu
