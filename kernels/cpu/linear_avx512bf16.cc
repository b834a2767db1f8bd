// The AVX-512 BF16 path of Linear (linear_dot.h): for CPUs with AVX512_BF16 but no AMX (AMD Zen 4
// and 5, Intel Cooper Lake). VDPBF16PS multiplies 32 bf16 pairs into 16 f32 sums in one
// instruction, on weights loaded as they are stored (no widening). Its inputs are bf16 on both
// sides, so each f32 activation is split once per call, as the AMX kernel does (linear_amx.h),
// into hi = bf16(x) and lo = bf16(x - hi): y = W·hi + W·lo keeps 16 bits of the activation's
// mantissa where rounding it to bf16 would keep 8 (the engine's logits then miss the float64
// reference by 10x more: tests/engine/reference_forward_test.cc).
//
// Two paths. Weights in WeightLayout::kAmxTiles (what PreferredLayout gives where in % 32 == 0)
// take the tile path below: each lane of a vector is one output, no horizontal sums. Row-major
// weights (other shapes, and the rows past the last 16-row block) take the row path: 32-element
// block b of a row accumulates W·hi, then W·lo, into accumulator b % 4 of its token; they are
// combined as (a0 + a1) + (a2 + a3) and reduced in one fixed order, whatever the batch.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/linear_amx.h"
#include "kernels/cpu/linear_dot.h"
#include "kernels/cpu/x86_intrinsics.h"

namespace tpserve::cpu::dot {

#if defined(__x86_64__)
namespace {

#define TPSERVE_TARGET_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

TPSERVE_TARGET_AVX512BF16 inline __m512bh LoadBf16x32(const uint16_t* p) {
  return reinterpret_cast<__m512bh>(_mm512_loadu_si512(p));
}

TPSERVE_TARGET_AVX512BF16 inline __m512bh MaskedLoadBf16x32(__mmask32 mask, const uint16_t* p) {
  return reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(mask, p));
}

// x[t]: token t's hi parts [in], then its lo parts [in] (SplitToBf16).
template <int n>
TPSERVE_TARGET_AVX512BF16 void DotRowsAvx512Bf16(const uint16_t* w, size_t rows, const uint16_t* const* x, int in,
                                                 float* out, size_t out_stride) {
  for (size_t r = 0; r < rows; ++r, w += in) {
    __m512 acc[n][4];
    for (int t = 0; t < n; ++t) {
      for (int k = 0; k < 4; ++k) acc[t][k] = _mm512_setzero_ps();
    }
    int i = 0;
    for (; i + 128 <= in; i += 128) {
      const char* ahead = reinterpret_cast<const char*>(w + i) + kPrefetchBytes;
      for (int line = 0; line < 4; ++line) PrefetchWeights(ahead + 64 * line);
      const __m512bh w0 = LoadBf16x32(w + i), w1 = LoadBf16x32(w + i + 32);
      const __m512bh w2 = LoadBf16x32(w + i + 64), w3 = LoadBf16x32(w + i + 96);
      for (int t = 0; t < n; ++t) {
        const uint16_t* hi = x[t] + i;
        const uint16_t* lo = hi + in;
        acc[t][0] = _mm512_dpbf16_ps(_mm512_dpbf16_ps(acc[t][0], w0, LoadBf16x32(hi)), w0, LoadBf16x32(lo));
        acc[t][1] =
            _mm512_dpbf16_ps(_mm512_dpbf16_ps(acc[t][1], w1, LoadBf16x32(hi + 32)), w1, LoadBf16x32(lo + 32));
        acc[t][2] =
            _mm512_dpbf16_ps(_mm512_dpbf16_ps(acc[t][2], w2, LoadBf16x32(hi + 64)), w2, LoadBf16x32(lo + 64));
        acc[t][3] =
            _mm512_dpbf16_ps(_mm512_dpbf16_ps(acc[t][3], w3, LoadBf16x32(hi + 96)), w3, LoadBf16x32(lo + 96));
      }
    }
    // Tail blocks (at most 4) continue the b % 4 assignment; unrolled, so that k is a constant and
    // the accumulators stay in registers (indexed at run time they live on the stack).
#pragma GCC unroll 4
    for (int k = 0; k < 4 && i < in; ++k, i += 32) {
      const int remaining = std::min(32, in - i);
      const __mmask32 mask = remaining == 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << remaining) - 1);
      const __m512bh wk = MaskedLoadBf16x32(mask, w + i);
      for (int t = 0; t < n; ++t) {
        const __m512 with_hi = _mm512_dpbf16_ps(acc[t][k], wk, MaskedLoadBf16x32(mask, x[t] + i));
        acc[t][k] = _mm512_dpbf16_ps(with_hi, wk, MaskedLoadBf16x32(mask, x[t] + in + i));
      }
    }
    for (int t = 0; t < n; ++t) {
      out[t * out_stride + r] =
          _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[t][0], acc[t][1]), _mm512_add_ps(acc[t][2], acc[t][3])));
    }
  }
}

// A shuffled integer vector (a permute, a broadcast) as 32 bf16. Clang 16's VectorCombine pass
// crashes on a shuffle whose result is bit-cast to a bf16 vector (the CI's sanitizer build); an
// empty asm statement between the two hides the shuffle from it. GCC needs none.
TPSERVE_TARGET_AVX512BF16 inline __m512bh AsBf16(__m512i v) {
#if defined(__clang__)
  asm("" : "+v"(v));
#endif
  return reinterpret_cast<__m512bh>(v);
}

// The tile path: weights in WeightLayout::kAmxTiles, where a block of 16 rows is [in / 2 pairs][16
// outputs][2] (linear.h), so one 64-byte line is input pair p of all 16 outputs. Two permutes
// copy it into two vectors, each holding 8 outputs' pair twice (lanes 2j and 2j + 1: output j);
// a token's hi pair and lo pair, stored side by side (SplitToBf16Pairs), are broadcast as one
// 64-bit value, so VDPBF16PS adds w[o][2p]·hi[2p] + w[o][2p+1]·hi[2p+1] to lane 2j and the same
// with lo to lane 2j + 1. Lane 2j is thus output j's hi sum over the pairs in order, lane 2j + 1
// its lo sum, and y = hi + lo: no horizontal sums, each weight line loaded once for all the
// tokens of a pass, and one broadcast per token and pair (one for each of hi and lo ran 12-23%
// slower at 8 tokens in cache). A lane's sequence does not depend on the number of tokens (n),
// so batches stay bitwise invariant.
//
// One 16-row block (w) against n tokens; out[t * out_stride + o]. One block at a time keeps the
// weights one sequential stream: two or four blocks side by side (more accumulator chains, each
// weight line shared by as many) read the LM head at one token at 64-82% of the paired read
// against 82-93% for one, and ran no faster elsewhere (bench_linear, docs/PERFORMANCE.md).
template <int n>
TPSERVE_TARGET_AVX512BF16 void TileBlockAvx512Bf16(const uint16_t* w, int in,
                                                   const uint16_t* const* x, float* out,
                                                   size_t out_stride) {
  const __m512i outputs_0_to_7 = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  const __m512i outputs_8_to_15 =
      _mm512_set_epi32(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8);
  __m512 first[n], second[n];  // outputs 0-7 and 8-15: lane 2j the hi sum, 2j + 1 the lo sum
  for (int t = 0; t < n; ++t) first[t] = second[t] = _mm512_setzero_ps();
  const int pairs = in / 2;
  for (int p = 0; p < pairs; ++p) {
    const uint16_t* line = w + 2 * amx::kTileRows * static_cast<size_t>(p);
    PrefetchWeights(reinterpret_cast<const char*>(line) + kPrefetchBytes);
    const __m512i wp = _mm512_loadu_si512(line);
    const __m512bh w_first = AsBf16(_mm512_permutexvar_epi32(outputs_0_to_7, wp));
    const __m512bh w_second = AsBf16(_mm512_permutexvar_epi32(outputs_8_to_15, wp));
#pragma GCC unroll 8
    for (int t = 0; t < n; ++t) {
      int64_t hi_lo;
      std::memcpy(&hi_lo, x[t] + 4 * static_cast<size_t>(p), sizeof(hi_lo));
      const __m512bh both = AsBf16(_mm512_set1_epi64(hi_lo));
      first[t] = _mm512_dpbf16_ps(first[t], w_first, both);
      second[t] = _mm512_dpbf16_ps(second[t], w_second, both);
    }
  }
  // Lane 2j + (lane 2j + 1), then the even lanes of both in order: outputs 0-15.
  const __m512i even_lanes =
      _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
#pragma GCC unroll 8
  for (int t = 0; t < n; ++t) {
    const __m512 a = _mm512_add_ps(first[t], _mm512_permute_ps(first[t], 0xB1));
    const __m512 b = _mm512_add_ps(second[t], _mm512_permute_ps(second[t], 0xB1));
    _mm512_storeu_ps(out + t * out_stride, _mm512_permutex2var_ps(a, even_lanes, b));
  }
}

using TileFn = void (*)(const uint16_t*, int, const uint16_t* const*, float*, size_t);

// Up to eight tokens share a pass over a block: 16 accumulators, and per input pair one weight
// load, two permutes and 8 broadcasts for 16 VDPBF16PS.
constexpr int kTilePassTokens = 8;
constexpr TileFn kTileFns[kTilePassTokens + 1] = {nullptr,
                                                  TileBlockAvx512Bf16<1>,
                                                  TileBlockAvx512Bf16<2>,
                                                  TileBlockAvx512Bf16<3>,
                                                  TileBlockAvx512Bf16<4>,
                                                  TileBlockAvx512Bf16<5>,
                                                  TileBlockAvx512Bf16<6>,
                                                  TileBlockAvx512Bf16<7>,
                                                  TileBlockAvx512Bf16<8>};

// 16 activations split: hi = bf16(v), lo = bf16(v - hi) (v - hi is exact).
TPSERVE_TARGET_AVX512BF16 inline void SplitBits16(__m512 v, __m256i* hi, __m256i* lo) {
  *hi = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
  const __m512 hi_f32 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(*hi), 16));
  *lo = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_sub_ps(v, hi_f32)));
}

// 16 (or, masked, fewer) activations: hi to `hi`, lo to `lo`.
TPSERVE_TARGET_AVX512BF16 inline void Split16(__mmask16 mask, const float* x, uint16_t* hi, uint16_t* lo) {
  __m256i hi_bits, lo_bits;
  SplitBits16(_mm512_maskz_loadu_ps(mask, x), &hi_bits, &lo_bits);
  _mm256_mask_storeu_epi16(hi, mask, hi_bits);
  _mm256_mask_storeu_epi16(lo, mask, lo_bits);
}

TPSERVE_TARGET_AVX512BF16 void SplitToBf16Avx512(const float* x, int tokens, int in, uint16_t* out) {
  for (int t = 0; t < tokens; ++t) {
    const float* row = x + static_cast<size_t>(t) * in;
    uint16_t* hi = out + static_cast<size_t>(t) * 2 * in;
    uint16_t* lo = hi + in;
    for (int i = 0; i < in; i += 16) {
      const int remaining = std::min(16, in - i);
      Split16(static_cast<__mmask16>((1u << remaining) - 1), row + i, hi + i, lo + i);
    }
  }
}

// Token rows of [in / 2][hi pair, lo pair] bf16 (in % 16 == 0), PairRowStride(in) apart.
TPSERVE_TARGET_AVX512BF16 void SplitToBf16PairsAvx512(const float* x, int tokens, int in,
                                                      uint16_t* out) {
  // 32-bit elements: pair k of the hi parts (a), then pair k of the lo parts (b), k = 0..7.
  const __m512i interleave =
      _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  for (int t = 0; t < tokens; ++t) {
    const float* row = x + static_cast<size_t>(t) * in;
    uint16_t* dst = out + static_cast<size_t>(t) * PairRowStride(in);
    for (int i = 0; i < in; i += 16) {
      __m256i hi, lo;
      SplitBits16(_mm512_loadu_ps(row + i), &hi, &lo);
      const __m512i a = _mm512_castsi256_si512(hi), b = _mm512_castsi256_si512(lo);
      _mm512_storeu_si512(dst + 2 * i, _mm512_permutex2var_epi32(a, interleave, b));
    }
  }
}

}  // namespace

const Table<Bf16Fn>& Avx512Bf16() {
  static const Table<Bf16Fn> table = {
      {nullptr, DotRowsAvx512Bf16<1>, DotRowsAvx512Bf16<2>, DotRowsAvx512Bf16<3>, DotRowsAvx512Bf16<4>},
      1};  // one row per call: 15-25% faster at one token than a whole range per call (measured)
  return table;
}

void SplitToBf16(const float* x, int tokens, int in, uint16_t* out) { SplitToBf16Avx512(x, tokens, in, out); }

void SplitToBf16Pairs(const float* x, int tokens, int in, uint16_t* out) {
  SplitToBf16PairsAvx512(x, tokens, in, out);
}

void TileRowsAvx512Bf16(const uint16_t* w, int in, const uint16_t* x, int tokens, size_t row_begin,
                        size_t row_end, float* y, size_t y_stride) {
  // Up to eight tokens: one pass over the range, each weight line loaded once for all of them.
  // More: each block is passed over by every group of eight while it is in cache, so the weights
  // stream from memory once.
  for (size_t row = row_begin; row < row_end; row += amx::kTileRows) {
    for (int t0 = 0; t0 < tokens; t0 += kTilePassTokens) {
      const int n = std::min(kTilePassTokens, tokens - t0);
      const uint16_t* rows[kTilePassTokens];
      for (int t = 0; t < n; ++t) rows[t] = x + static_cast<size_t>(t0 + t) * PairRowStride(in);
      kTileFns[n](w + row * in, in, rows, y + static_cast<size_t>(t0) * y_stride + row, y_stride);
    }
  }
}

#else  // not x86-64: never available, never called

const Table<Bf16Fn>& Avx512Bf16() {
  static const Table<Bf16Fn> none;
  return none;
}
void SplitToBf16(const float*, int, int, uint16_t*) {}
void SplitToBf16Pairs(const float*, int, int, uint16_t*) {}
void TileRowsAvx512Bf16(const uint16_t*, int, const uint16_t*, int, size_t, size_t, float*,
                        size_t) {}

#endif

}  // namespace tpserve::cpu::dot
