// The AVX2 + FMA path of Linear (linear_dot.h): for x86 CPUs without AVX-512 (most desktops and
// laptops, older EPYC and Xeon, many cloud VMs). The bf16 weights are widened to f32 (a shift of
// the 16 bits into the high half) and multiplied with f32 FMAs: 8-element block b of a row
// accumulates into chain b % kChains of its token; the chains are combined in one fixed tree and
// the 8 lanes reduced in one fixed order.
//
// Twelve chains, not four: one token's pass is a chain of dependent FMAs per accumulator, and on
// an AMD EPYC (Zen 5) twelve streamed the LM head 1.1-1.2x faster than four, where eight did no
// better than four and sixteen spill (16 ymm registers; docs/PERFORMANCE.md). Twelve accumulators
// for each of n tokens do not fit, so n tokens take n sweeps over the row (from cache after the
// first), each sweep 12 / n chains of every token: four and eight tokens ran 1.2x faster than
// before, two and three 10-15% slower (the first sweep skips lines). A chain's FMAs and the
// combining tree are the same for every n, so a token's result does not depend on its batch mates.

#include <algorithm>
#include <utility>

#include "kernels/cpu/linear_dot.h"
#include "kernels/cpu/x86_intrinsics.h"

namespace tpserve::cpu::dot {

#if defined(__x86_64__)
namespace {

#define TPSERVE_TARGET_AVX2 __attribute__((target("avx2,fma")))

TPSERVE_TARGET_AVX2 inline __m256 WidenBf16x8(__m128i bf16) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bf16), 16));
}

TPSERVE_TARGET_AVX2 inline __m256 LoadBf16x8(const uint16_t* p) {
  return WidenBf16x8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// The lanes of v summed as ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)).
TPSERVE_TARGET_AVX2 inline float ReduceAdd(__m256 v) {
  const __m128 quad = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
  return _mm_cvtss_f32(_mm_add_ss(pair, _mm_shuffle_ps(pair, pair, 1)));
}

constexpr int kChains = 12;                // 8-float accumulators per token
constexpr int kStride = 8 * kChains;       // elements a full round of the chains covers
static_assert(kChains % 4 == 0 && kChains % 3 == 0, "n = 1..4 tokens split the chains evenly");

// Chains [first, first + count) of n tokens over one row (block b of the row to chain b % kChains):
// sums[t][first + k] gets chain first + k's total. The first sweep of a row prefetches it.
template <int n, int first, int count>
TPSERVE_TARGET_AVX2 inline void RowSweep(const uint16_t* w, const float* const* x, int in,
                                         StreamPrefetch prefetch, __m256 (&sums)[n][kChains]) {
  __m256 acc[n][count];
  for (int t = 0; t < n; ++t) {
    for (int k = 0; k < count; ++k) acc[t][k] = _mm256_setzero_ps();
  }
  int i = 0;
  for (; i + kStride <= in; i += kStride) {
    if constexpr (first == 0) PrefetchAhead(w + i, kStride * sizeof(uint16_t), prefetch);
#pragma GCC unroll 12
    for (int k = 0; k < count; ++k) {
      const int at = i + 8 * (first + k);
      const __m256 wk = LoadBf16x8(w + at);
      for (int t = 0; t < n; ++t) acc[t][k] = _mm256_fmadd_ps(wk, _mm256_loadu_ps(x[t] + at), acc[t][k]);
    }
  }
  // The last round's blocks (fewer than kChains, the last maybe partial) continue the assignment.
#pragma GCC unroll 12
  for (int k = 0; k < count; ++k) {
    const int at = i + 8 * (first + k);
    if (at >= in) break;
    const int remaining = std::min(8, in - at);
    alignas(16) uint16_t w_tail[8] = {};
    alignas(32) int32_t lanes[8];
    std::copy_n(w + at, remaining, w_tail);
    for (int l = 0; l < 8; ++l) lanes[l] = l < remaining ? -1 : 0;
    const __m256i mask = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes));
    const __m256 wk = LoadBf16x8(w_tail);
    for (int t = 0; t < n; ++t) acc[t][k] = _mm256_fmadd_ps(wk, _mm256_maskload_ps(x[t] + at, mask), acc[t][k]);
  }
  for (int t = 0; t < n; ++t) {
    for (int k = 0; k < count; ++k) sums[t][first + k] = acc[t][k];
  }
}

// Chains combined as ((c0 + c1) + (c2 + c3)) + ((c4 + c5) + (c6 + c7)) + ((c8 + c9) + (c10 + c11)).
TPSERVE_TARGET_AVX2 inline __m256 CombineChains(const __m256 (&c)[kChains]) {
  __m256 quads[kChains / 4];
  for (int q = 0; q < kChains / 4; ++q) {
    quads[q] = _mm256_add_ps(_mm256_add_ps(c[4 * q], c[4 * q + 1]), _mm256_add_ps(c[4 * q + 2], c[4 * q + 3]));
  }
  return _mm256_add_ps(_mm256_add_ps(quads[0], quads[1]), quads[2]);
}

template <int n, int... sweep>
TPSERVE_TARGET_AVX2 inline void RowSweeps(const uint16_t* w, const float* const* x, int in,
                                          StreamPrefetch prefetch, __m256 (&sums)[n][kChains],
                                          std::integer_sequence<int, sweep...>) {
  constexpr int per_sweep = kChains / n;
  (RowSweep<n, sweep * per_sweep, per_sweep>(w, x, in, prefetch, sums), ...);
}

template <int n>
TPSERVE_TARGET_AVX2 void DotRowsAvx2(const uint16_t* w, size_t rows, const float* const* x, int in, float* out,
                                     size_t out_stride, StreamPrefetch prefetch) {
  for (size_t r = 0; r < rows; ++r, w += in) {
    __m256 sums[n][kChains];
    RowSweeps<n>(w, x, in, prefetch, sums, std::make_integer_sequence<int, n>());
    for (int t = 0; t < n; ++t) out[t * out_stride + r] = ReduceAdd(CombineChains(sums[t]));
  }
}

}  // namespace

const Table<F32Fn>& Avx2() {
  static const Table<F32Fn> table = {{nullptr, DotRowsAvx2<1>, DotRowsAvx2<2>, DotRowsAvx2<3>, DotRowsAvx2<4>}};
  return table;
}

#else  // not x86-64: never available, never called

const Table<F32Fn>& Avx2() {
  static const Table<F32Fn> none;
  return none;
}

#endif

}  // namespace tpserve::cpu::dot
