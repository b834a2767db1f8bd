#include "kernels/cpu/linear.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/thread_pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

// GCC 12 reports the _mm512_undefined_* placeholders inside its own AVX-512 headers as
// "maybe uninitialized" once they are inlined here; the warning is about the headers, not us.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace tpserve::cpu {
namespace {

constexpr int kTokenTile = 4;  // tokens that share one pass over a weight row
// Software prefetch distance for weights (A/B on this machine: ~10% faster decode at 16 KiB).
constexpr int kPrefetchBytes = 16384;

#if defined(__x86_64__)
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512 LoadBf16x16(const uint16_t* p) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}

// Dot products of one bf16 weight row with `n` (1..4) activation rows. 16-element block b of
// the row accumulates into accumulator b % 4 of its token (four independent chains hide the FMA
// latency and keep four loads in flight); the accumulators are combined as (a0 + a1) + (a2 + a3)
// and reduced the same way for every token, so a token's result does not depend on n.
template <int n>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void DotRowAvx512(const uint16_t* w,
                                                                    const float* const* x, int in,
                                                                    float* out) {
  __m512 acc[n][4];
  for (int t = 0; t < n; ++t) {
    for (int k = 0; k < 4; ++k) acc[t][k] = _mm512_setzero_ps();
  }
  int i = 0;
  for (; i + 64 <= in; i += 64) {
    // The hardware streamer stops at 4 KiB boundaries: fetch the weights a few KiB ahead (past
    // this row into the next ones, which are contiguous).
    _mm_prefetch(reinterpret_cast<const char*>(w + i) + kPrefetchBytes, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(w + i) + kPrefetchBytes + 64, _MM_HINT_T0);
    const __m512 w0 = LoadBf16x16(w + i), w1 = LoadBf16x16(w + i + 16);
    const __m512 w2 = LoadBf16x16(w + i + 32), w3 = LoadBf16x16(w + i + 48);
    for (int t = 0; t < n; ++t) {
      acc[t][0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x[t] + i), acc[t][0]);
      acc[t][1] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x[t] + i + 16), acc[t][1]);
      acc[t][2] = _mm512_fmadd_ps(w2, _mm512_loadu_ps(x[t] + i + 32), acc[t][2]);
      acc[t][3] = _mm512_fmadd_ps(w3, _mm512_loadu_ps(x[t] + i + 48), acc[t][3]);
    }
  }
  for (int k = 0; i < in; i += 16, ++k) {  // tail blocks continue the b % 4 assignment
    const int remaining = std::min(16, in - i);
    const __mmask16 mask = static_cast<__mmask16>((1u << remaining) - 1);
    const __m512 wk = _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, w + i)), 16));
    for (int t = 0; t < n; ++t) {
      acc[t][k] = _mm512_fmadd_ps(wk, _mm512_maskz_loadu_ps(mask, x[t] + i), acc[t][k]);
    }
  }
  for (int t = 0; t < n; ++t) {
    const __m512 sum = _mm512_add_ps(_mm512_add_ps(acc[t][0], acc[t][1]),
                                     _mm512_add_ps(acc[t][2], acc[t][3]));
    out[t] = _mm512_reduce_add_ps(sum);
  }
}
#endif

// Portable kernel: 32 lanes of fused multiply-adds, reduced pairwise in a fixed order.
template <int n>
void DotRowPortable(const uint16_t* w, const float* const* x, int in, float* out) {
  for (int t = 0; t < n; ++t) {
    float lanes[32] = {};
    for (int i = 0; i < in; ++i) {
      uint32_t bits = static_cast<uint32_t>(w[i]) << 16;
      float wf;
      std::memcpy(&wf, &bits, 4);
      lanes[i % 32] = std::fma(wf, x[t][i], lanes[i % 32]);
    }
    for (int width = 16; width >= 1; width /= 2) {
      for (int k = 0; k < width; ++k) lanes[k] += lanes[k + width];
    }
    out[t] = lanes[0];
  }
}

using DotFn = void (*)(const uint16_t*, const float* const*, int, float*);

struct DotTable {
  DotFn fn[kTokenTile + 1] = {};
};

DotTable MakeTable() {
  DotTable table;
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl")) {
    table.fn[1] = DotRowAvx512<1>;
    table.fn[2] = DotRowAvx512<2>;
    table.fn[3] = DotRowAvx512<3>;
    table.fn[4] = DotRowAvx512<4>;
    return table;
  }
#endif
  table.fn[1] = DotRowPortable<1>;
  table.fn[2] = DotRowPortable<2>;
  table.fn[3] = DotRowPortable<3>;
  table.fn[4] = DotRowPortable<4>;
  return table;
}

const DotTable& Table() {
  static const DotTable table = MakeTable();
  return table;
}

}  // namespace

bool LinearUsesAvx512() {
#if defined(__x86_64__)
  return Table().fn[1] == DotRowAvx512<1>;
#else
  return false;
#endif
}

void Linear(const LinearArgs& a, ThreadPool* pool) {
  const DotTable& table = Table();
  // Blocks of weight rows stay in cache while every token tile passes over them, so a batch
  // streams the weights from memory once.
  constexpr size_t kRowBlock = 32;
  auto rows = [&](size_t row_begin, size_t row_end) {
    for (size_t block = row_begin; block < row_end; block += kRowBlock) {
      const size_t block_end = std::min(row_end, block + kRowBlock);
      for (int t0 = 0; t0 < a.tokens; t0 += kTokenTile) {
        const int n = std::min(kTokenTile, a.tokens - t0);
        const float* x[kTokenTile];
        for (int t = 0; t < n; ++t) x[t] = a.x + static_cast<size_t>(t0 + t) * a.in;
        float dots[kTokenTile];
        for (size_t o = block; o < block_end; ++o) {
          table.fn[n](a.w + o * a.in, x, a.in, dots);
          for (int t = 0; t < n; ++t) {
            a.y[static_cast<size_t>(t0 + t) * a.out + o] = a.bias ? dots[t] + a.bias[o] : dots[t];
          }
        }
      }
    }
  };
  if (pool == nullptr) {
    rows(0, a.out);
  } else {
    pool->ParallelFor(a.out, 16, rows);
  }
}

}  // namespace tpserve::cpu
