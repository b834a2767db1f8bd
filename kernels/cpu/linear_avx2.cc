// The AVX2 + FMA path of Linear (linear_dot.h): for x86 CPUs without AVX-512 (most desktops and
// laptops, older EPYC and Xeon, many cloud VMs). Sixteen bf16 weights are loaded as one 256-bit
// vector and widened to f32 as two: the even elements by a shift of each 32-bit lane, the odd ones
// by a mask (a bf16 is the high half of its f32), against activations stored in the same order
// (PermuteForAvx2, once per call). Then f32 FMAs: the even and odd halves of 16-element group g of
// a row accumulate into chains 2g % kChains and (2g + 1) % kChains of its token; the chains are
// combined in one fixed tree and the 8 lanes reduced in one fixed order. That is half the vector
// instructions per weight of widening each 8 weights with a zero-extending shuffle and a shift (the
// kernel before it); on an AMD EPYC (Zen 5), batch-1 decode's fraction of the paired read rose
// 1.045-1.061x (medians of two runs of alternated pairs, 14 of 18 better), the layer matrices at
// one token 1.10-1.14x in an alternated harness, the LM head not (docs/PERFORMANCE.md, session 34).
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

// 16 bf16 weights as f32, exactly: the even elements (half 0) or the odd ones (half 1).
template <int half>
TPSERVE_TARGET_AVX2 inline __m256 WidenHalf(__m256i bits) {
  if constexpr (half == 0) return _mm256_castsi256_ps(_mm256_slli_epi32(bits, 16));
  return _mm256_castsi256_ps(_mm256_and_si256(bits, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
}

// A group of 16 weights from w; where fewer than 16 remain in the row, those and zeros.
TPSERVE_TARGET_AVX2 inline __m256i LoadGroup(const uint16_t* w, int remaining) {
  if (remaining >= 16) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
  alignas(32) uint16_t tail[16] = {};
  std::copy_n(w, remaining, tail);
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(tail));
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

// Chain `chain`'s half of the 16-weight group `bits` at element `at` of a row, into acc[t][k] of
// each of n tokens.
template <int n, int count>
TPSERVE_TARGET_AVX2 inline void AddGroupHalf(__m256i bits, int chain, const float* const* x, int at,
                                             __m256 (&acc)[n][count], int k) {
  const __m256 wk = chain % 2 == 0 ? WidenHalf<0>(bits) : WidenHalf<1>(bits);
  const int half = 8 * (chain % 2);
  for (int t = 0; t < n; ++t) acc[t][k] = _mm256_fmadd_ps(wk, _mm256_loadu_ps(x[t] + at + half), acc[t][k]);
}

// Chains [first, first + count) of n tokens over one row (chain c: half c % 2 of groups g with
// 2g % kChains == c - c % 2): sums[t][first + k] gets chain first + k's total. x[t]: a token's
// activations from PermuteForAvx2. The first sweep of a row prefetches it.
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
      const int chain = first + k, at = i + 16 * (chain / 2);
      AddGroupHalf<n>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + at)), chain, x, at, acc, k);
    }
  }
  // The last round's groups (fewer than kChains / 2, the last maybe partial) continue the
  // assignment; the activations past `in` are 0 (PermuteForAvx2), and so are the weights read.
#pragma GCC unroll 12
  for (int k = 0; k < count; ++k) {
    const int chain = first + k, at = i + 16 * (chain / 2);
    if (at >= in) break;
    AddGroupHalf<n>(LoadGroup(w + at, in - at), chain, x, at, acc, k);
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

// Each 16-element group of a row as its 8 even elements, then its 8 odd ones; zeros past `in`.
TPSERVE_TARGET_AVX2 void PermuteForAvx2Impl(const float* x, int tokens, int in, float* out) {
  const size_t stride = Avx2RowStride(in);
  const __m256i even_odd = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  for (int t = 0; t < tokens; ++t) {
    const float* row = x + static_cast<size_t>(t) * in;
    float* dst = out + static_cast<size_t>(t) * stride;
    int i = 0;
    for (; i + 16 <= in; i += 16) {
      // Within each 128-bit half: evens, then odds; then the halves' evens together.
      const __m256 a = _mm256_permutevar8x32_ps(_mm256_loadu_ps(row + i), even_odd);  // e0..e3 o0..o3
      const __m256 b = _mm256_permutevar8x32_ps(_mm256_loadu_ps(row + i + 8), even_odd);  // e4..e7 o4..o7
      _mm256_storeu_ps(dst + i, _mm256_permute2f128_ps(a, b, 0x20));
      _mm256_storeu_ps(dst + i + 8, _mm256_permute2f128_ps(a, b, 0x31));
    }
    for (size_t j = static_cast<size_t>(i); j < stride; ++j) dst[j] = 0.0f;
    for (int j = i; j < in; ++j) dst[i + (j - i) / 2 + 8 * ((j - i) % 2)] = row[j];
  }
}

}  // namespace

void PermuteForAvx2(const float* x, int tokens, int in, float* out) { PermuteForAvx2Impl(x, tokens, in, out); }

const Table<F32Fn>& Avx2() {
  static const Table<F32Fn> table = {
      .fn = {nullptr, DotRowsAvx2<1>, DotRowsAvx2<2>, DotRowsAvx2<3>, DotRowsAvx2<4>},
      .one_token_prefetch = StreamPrefetch::kEveryLine};
  return table;
}

#else  // not x86-64: never available, never called

const Table<F32Fn>& Avx2() {
  static const Table<F32Fn> none;
  return none;
}
void PermuteForAvx2(const float*, int, int, float*) {}

#endif

}  // namespace tpserve::cpu::dot
