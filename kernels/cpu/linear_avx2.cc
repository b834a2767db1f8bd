// The AVX2 + FMA path of Linear (linear_dot.h): for x86 CPUs without AVX-512 (most desktops and
// laptops, older EPYC and Xeon, many cloud VMs). The bf16 weights are widened to f32 (a shift of
// the 16 bits into the high half) and multiplied with f32 FMAs, as the AVX-512 kernel does with
// half its lanes: 8-element block b of a row accumulates into accumulator b % 4 of its token,
// combined as (a0 + a1) + (a2 + a3) and reduced in one fixed order.
#include <algorithm>

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

template <int n>
TPSERVE_TARGET_AVX2 void DotRowsAvx2(const uint16_t* w, size_t rows, const float* const* x, int in, float* out,
                                     size_t out_stride) {
  for (size_t r = 0; r < rows; ++r, w += in) {
    __m256 acc[n][4];
    for (int t = 0; t < n; ++t) {
      for (int k = 0; k < 4; ++k) acc[t][k] = _mm256_setzero_ps();
    }
    int i = 0;
    for (; i + 32 <= in; i += 32) {
      PrefetchWeights(reinterpret_cast<const char*>(w + i) + kPrefetchBytes);
      const __m256 w0 = LoadBf16x8(w + i), w1 = LoadBf16x8(w + i + 8);
      const __m256 w2 = LoadBf16x8(w + i + 16), w3 = LoadBf16x8(w + i + 24);
      for (int t = 0; t < n; ++t) {
        acc[t][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[t] + i), acc[t][0]);
        acc[t][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x[t] + i + 8), acc[t][1]);
        acc[t][2] = _mm256_fmadd_ps(w2, _mm256_loadu_ps(x[t] + i + 16), acc[t][2]);
        acc[t][3] = _mm256_fmadd_ps(w3, _mm256_loadu_ps(x[t] + i + 24), acc[t][3]);
      }
    }
    // Tail blocks (at most 4) continue the b % 4 assignment; unrolled, so that k is a constant and
    // the accumulators stay in registers (indexed at run time they live on the stack).
#pragma GCC unroll 4
    for (int k = 0; k < 4 && i < in; ++k, i += 8) {
      const int remaining = std::min(8, in - i);
      alignas(16) uint16_t w_tail[8] = {};
      alignas(32) int32_t lanes[8];
      std::copy_n(w + i, remaining, w_tail);
      for (int l = 0; l < 8; ++l) lanes[l] = l < remaining ? -1 : 0;
      const __m256i mask = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes));
      const __m256 wk = LoadBf16x8(w_tail);
      for (int t = 0; t < n; ++t) {
        acc[t][k] = _mm256_fmadd_ps(wk, _mm256_maskload_ps(x[t] + i, mask), acc[t][k]);
      }
    }
    for (int t = 0; t < n; ++t) {
      out[t * out_stride + r] =
          ReduceAdd(_mm256_add_ps(_mm256_add_ps(acc[t][0], acc[t][1]), _mm256_add_ps(acc[t][2], acc[t][3])));
    }
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
