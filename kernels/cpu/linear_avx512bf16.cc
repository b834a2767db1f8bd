// The AVX-512 BF16 path of Linear (linear_dot.h): for CPUs with AVX512_BF16 but no AMX (AMD Zen 4
// and 5, Intel Cooper Lake). VDPBF16PS multiplies 32 bf16 pairs into 16 f32 sums in one
// instruction, on weights loaded as they are stored (no widening). Its inputs are bf16 on both
// sides, so each f32 activation is split once per call, as the AMX kernel does (linear_amx.h),
// into hi = bf16(x) and lo = bf16(x - hi): y = W·hi + W·lo keeps 16 bits of the activation's
// mantissa where rounding it to bf16 would keep 8 (the engine's logits then miss the float64
// reference by 10x more: tests/engine/reference_forward_test.cc).
//
// Two paths. Weights in WeightLayout::kPairGroups (what PreferredLayout gives where in % 32 == 0)
// take the group path below: each lane of a vector is one output, no horizontal sums. Row-major
// weights (other shapes, and the rows past the last 32-row group) take the row path: 32-element
// block b of a row accumulates W·hi, then W·lo, into accumulator b % 4 of its token; they are
// combined as (a0 + a1) + (a2 + a3) and reduced in one fixed order, whatever the batch.
#include <algorithm>
#include <cstring>
#include <vector>

#include "common/cache_line_allocator.h"

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
                                                 float* out, size_t out_stride, StreamPrefetch prefetch) {
  for (size_t r = 0; r < rows; ++r, w += in) {
    __m512 acc[n][4];
    for (int t = 0; t < n; ++t) {
      for (int k = 0; k < 4; ++k) acc[t][k] = _mm512_setzero_ps();
    }
    int i = 0;
    for (; i + 128 <= in; i += 128) {
      PrefetchAhead(w + i, 256, prefetch);
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

// The group path: weights in WeightLayout::kPairGroups, where a group of 32 rows (two blocks of 16
// outputs) is [in / 2 pairs][2 blocks][16 outputs][2] (linear.h), so input pair p of a group is two
// 64-byte lines side by side, one per block. Two permutes copy a block's line into two vectors,
// each holding 8 outputs' pair twice (lanes 2j and 2j + 1: output j); a token's hi pair and lo pair,
// stored side by side (SplitToBf16Pairs), are broadcast as one 64-bit value, so VDPBF16PS adds
// w[o][2p]·hi[2p] + w[o][2p+1]·hi[2p+1] to lane 2j and the same with lo to lane 2j + 1. Lane 2j is
// thus output j's hi sum over the pairs in order, lane 2j + 1 its lo sum, and y = hi + lo: no
// horizontal sums, and one broadcast per token and pair for both blocks.
//
// A pass computes both blocks of a group for up to four tokens (16 accumulators; 32 registers hold
// no more), reading the group as one stream in memory order. At one token that is four chains
// where a 16-row block alone has two: with two, VDPBF16PS's latency held the read to about 80% of
// the DRAM ceiling (bench_linear, docs/PERFORMANCE.md). Other orders measured slower on the AMD
// EPYC (Zen 5) this was tuned on: two blocks stored apart and read side by side (two streams) read
// the LM head at 64-82% of the paired read against 82-93% for one block; two chunks of a block
// 2 KiB apart ran one token 20% slower; a pass over one block of a group (every other line) from
// memory ran eight tokens 16-50% slower (in session 18, against whole groups; chunk by chunk, as
// below, it is now the faster order).
//
// More than four tokens pass over one block at a time, in eights (16 accumulators, half the
// permutes per product). Up to kChunkedTokens, the group goes chunk by chunk (kChunkPairs input
// pairs, 16 KiB), each chunk in the L1 cache while every pass reads it, the sums waiting in f32
// memory between chunks: every eight tokens' pass over block 0, then over block 1 (a last four or
// fewer over both): each line is permuted once per eight tokens, not once per four. Against the
// first four over both blocks and the rest in eights over one (sessions 18-33), this ran a decode
// step at batch 8 1.03-1.05x faster and its LM head 1.04-1.05x (`tpserve bench-decode`, three runs
// of alternated pairs), and the layer shapes at 12-24 tokens 1.03-1.07x (docs/PERFORMANCE.md,
// session 34). More tokens take whole groups from L2 (no sums traffic): the first four over both
// blocks, which brings the group from memory in order, the rest in eights over one; bench_linear
// measured that 7-13% faster at 64 and 512 tokens than chunks, and 7-16% slower at 8 and 16.
// A lane's sequence is the same whichever pass computes it (and an f32 store and load are exact),
// so batches stay bitwise invariant.
constexpr int kBothBlocksTokens = 4;
constexpr int kOneBlockTokens = 8;
constexpr int kChunkedTokens = 32;
constexpr int kChunkPairs = 128;
// One token's pass over each group streams the weights as fast as memory gives them and takes the
// page-start prefetch alone; more tokens take every line with the page starts further ahead
// (stream_prefetch.h). Against every line alone, page starts alone ran one token 1.2-1.5x, two
// 1.1-1.3x, three 0.94-1.16x, four 0.9-0.98x; against every line with the page starts, two and
// three tokens ran 1.03-1.22x and 1.14-1.25x slower with page starts alone (bench_linear,
// docs/PERFORMANCE.md, session 27).
constexpr int kPageStartsTokens = 1;
constexpr int kSumsPerToken = 2 * 2 * 16;  // [2 blocks][outputs 0-7, 8-15][16 lanes]

// Blocks [first_block, first_block + kBlocks) of one group against n tokens, over input pairs
// [pair_begin, pair_end) of `pairs`. sums: kSumsPerToken floats per token, read at the start unless
// pair_begin is 0 and written at the end unless pair_end is `pairs`; after the last pair, block
// b's output o of token t goes to out[t * out_stride + 16 b + o]. With kEveryLine, the pass
// prefetches its own blocks' lines, and from_memory says whether it is the first over these pairs,
// the one that also prefetches the page starts further ahead (stream_prefetch.h,
// kEveryLinePageStartsBytes).
template <int n, int kBlocks, StreamPrefetch kPrefetch>
TPSERVE_TARGET_AVX512BF16 void GroupPassAvx512Bf16(const uint16_t* group, int first_block,
                                                   int pair_begin, int pair_end, int pairs,
                                                   const uint16_t* const* x, float* sums,
                                                   float* out, size_t out_stride,
                                                   bool from_memory) {
  const __m512i outputs_0_to_7 = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  const __m512i outputs_8_to_15 =
      _mm512_set_epi32(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8);
  constexpr int kVectors = 2 * kBlocks;  // per token: [block][outputs 0-7, 8-15]
  auto sum_at = [&](int t, int v) { return sums + t * kSumsPerToken + (2 * first_block + v) * 16; };
  __m512 acc[n][kVectors];
#pragma GCC unroll 8
  for (int t = 0; t < n; ++t) {
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v) {
      acc[t][v] = pair_begin == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(sum_at(t, v));
    }
  }
  for (int p = pair_begin; p < pair_end; ++p) {
    const uint16_t* lines = group + 2 * kPairGroupRows * static_cast<size_t>(p);
    if constexpr (kPrefetch == StreamPrefetch::kPageStarts) {
      PrefetchPageStartsAhead(lines, 2 * kPairGroupRows * sizeof(uint16_t));  // the pair's two lines
    } else if (from_memory) {
      PrefetchPageStartsAhead(lines, 2 * kPairGroupRows * sizeof(uint16_t),
                              kEveryLinePageStartsBytes);
    }
    __m512bh w[kVectors];
#pragma GCC unroll 2
    for (int b = 0; b < kBlocks; ++b) {
      const uint16_t* line = lines + 2 * amx::kTileRows * (first_block + b);
      if constexpr (kPrefetch == StreamPrefetch::kEveryLine) PrefetchLineAhead(line);
      const __m512i wp = _mm512_loadu_si512(line);
      w[2 * b] = AsBf16(_mm512_permutexvar_epi32(outputs_0_to_7, wp));
      w[2 * b + 1] = AsBf16(_mm512_permutexvar_epi32(outputs_8_to_15, wp));
    }
#pragma GCC unroll 8
    for (int t = 0; t < n; ++t) {
      int64_t hi_lo;
      std::memcpy(&hi_lo, x[t] + 4 * static_cast<size_t>(p), sizeof(hi_lo));
      const __m512bh both = AsBf16(_mm512_set1_epi64(hi_lo));
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v) acc[t][v] = _mm512_dpbf16_ps(acc[t][v], w[v], both);
    }
  }
  if (pair_end < pairs) {
#pragma GCC unroll 8
    for (int t = 0; t < n; ++t) {
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v) _mm512_storeu_ps(sum_at(t, v), acc[t][v]);
    }
    return;
  }
  // Lane 2j + (lane 2j + 1), then the even lanes of both halves in order: outputs 0-15.
  const __m512i even_lanes =
      _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
#pragma GCC unroll 8
  for (int t = 0; t < n; ++t) {
#pragma GCC unroll 2
    for (int b = 0; b < kBlocks; ++b) {
      const __m512 first = acc[t][2 * b], second = acc[t][2 * b + 1];  // outputs 0-7, 8-15
      const __m512 first_sums = _mm512_add_ps(first, _mm512_permute_ps(first, 0xB1));
      const __m512 second_sums = _mm512_add_ps(second, _mm512_permute_ps(second, 0xB1));
      _mm512_storeu_ps(out + t * out_stride + amx::kTileRows * (first_block + b),
                       _mm512_permutex2var_ps(first_sums, even_lanes, second_sums));
    }
  }
}

using GroupPassFn = void (*)(const uint16_t*, int, int, int, int, const uint16_t* const*, float*,
                             float*, size_t, bool);
constexpr auto kEvery = StreamPrefetch::kEveryLine;
constexpr GroupPassFn kBothBlocksPageStarts[kPageStartsTokens + 1] = {
    nullptr, GroupPassAvx512Bf16<1, 2, StreamPrefetch::kPageStarts>};
constexpr GroupPassFn kBothBlocks[kBothBlocksTokens + 1] = {
    nullptr, GroupPassAvx512Bf16<1, 2, kEvery>, GroupPassAvx512Bf16<2, 2, kEvery>,
    GroupPassAvx512Bf16<3, 2, kEvery>, GroupPassAvx512Bf16<4, 2, kEvery>};
constexpr GroupPassFn kOneBlock[kOneBlockTokens + 1] = {
    nullptr,
    GroupPassAvx512Bf16<1, 1, kEvery>,
    GroupPassAvx512Bf16<2, 1, kEvery>,
    GroupPassAvx512Bf16<3, 1, kEvery>,
    GroupPassAvx512Bf16<4, 1, kEvery>,
    GroupPassAvx512Bf16<5, 1, kEvery>,
    GroupPassAvx512Bf16<6, 1, kEvery>,
    GroupPassAvx512Bf16<7, 1, kEvery>,
    GroupPassAvx512Bf16<8, 1, kEvery>};

// The screening pass of a greedy LM head (greedy_linear.h): both blocks of one group against the
// hi parts alone, n <= 8 tokens. Each 64-byte line is used as stored (16 outputs' pairs, lane o
// output o) with a token's hi pair broadcast as one 32-bit value: one VDPBF16PS per line and token
// and no permutes, where the exact pass takes two of each. Lane o of block b's sum is output
// 16 b + o's W·hi over the pairs in order; the rounding differs from the exact pass's, which
// greedy_linear.cc bounds. from_memory: the first pass over the group, which prefetches it.
template <int n>
TPSERVE_TARGET_AVX512BF16 void GroupHiPassAvx512Bf16(const uint16_t* group, int pairs,
                                                     const uint16_t* const* x, float* out,
                                                     size_t out_stride, bool from_memory) {
  __m512 acc[n][2];
#pragma GCC unroll 8
  for (int t = 0; t < n; ++t) acc[t][0] = acc[t][1] = _mm512_setzero_ps();
  for (int p = 0; p < pairs; ++p) {
    const uint16_t* lines = group + 2 * kPairGroupRows * static_cast<size_t>(p);
    if (from_memory) {
      if constexpr (n == 1) {
        PrefetchPageStartsAhead(lines, 2 * kPairGroupRows * sizeof(uint16_t));
      } else {
        PrefetchPageStartsAhead(lines, 2 * kPairGroupRows * sizeof(uint16_t),
                                kEveryLinePageStartsBytes);
        PrefetchLineAhead(lines);
        PrefetchLineAhead(lines + 2 * amx::kTileRows);
      }
    }
    const __m512bh w0 = LoadBf16x32(lines), w1 = LoadBf16x32(lines + 2 * amx::kTileRows);
#pragma GCC unroll 8
    for (int t = 0; t < n; ++t) {
      int32_t hi_pair;
      std::memcpy(&hi_pair, x[t] + 4 * static_cast<size_t>(p), sizeof(hi_pair));
      const __m512bh hi = AsBf16(_mm512_set1_epi32(hi_pair));
      acc[t][0] = _mm512_dpbf16_ps(acc[t][0], w0, hi);
      acc[t][1] = _mm512_dpbf16_ps(acc[t][1], w1, hi);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < n; ++t) {
    _mm512_storeu_ps(out + t * out_stride, acc[t][0]);
    _mm512_storeu_ps(out + t * out_stride + amx::kTileRows, acc[t][1]);
  }
}

using GroupHiPassFn = void (*)(const uint16_t*, int, const uint16_t* const*, float*, size_t, bool);
constexpr GroupHiPassFn kHiPass[kOneBlockTokens + 1] = {nullptr,
                                                        GroupHiPassAvx512Bf16<1>,
                                                        GroupHiPassAvx512Bf16<2>,
                                                        GroupHiPassAvx512Bf16<3>,
                                                        GroupHiPassAvx512Bf16<4>,
                                                        GroupHiPassAvx512Bf16<5>,
                                                        GroupHiPassAvx512Bf16<6>,
                                                        GroupHiPassAvx512Bf16<7>,
                                                        GroupHiPassAvx512Bf16<8>};

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

void GroupRowsAvx512Bf16(const uint16_t* w, int in, const uint16_t* x, int tokens,
                         size_t row_begin, size_t row_end, float* y, size_t y_stride) {
  const int pairs = in / 2;
  const uint16_t* rows[kOneBlockTokens];  // the pass's tokens' split activations
  // Whole groups for up to four tokens (one pass) and for more than kChunkedTokens; chunks between.
  const bool chunked = tokens > kBothBlocksTokens && tokens <= kChunkedTokens;
  // One token's pass over each group prefetches page starts alone.
  const GroupPassFn* both_blocks = tokens <= kPageStartsTokens ? kBothBlocksPageStarts : kBothBlocks;
  const int chunk_pairs = chunked ? kChunkPairs : pairs;
  thread_local std::vector<float, CacheLineAllocator<float>> sums;  // this thread's own
  sums.resize(static_cast<size_t>(tokens) * kSumsPerToken);
  for (size_t row = row_begin; row < row_end; row += kPairGroupRows) {
    const uint16_t* group = w + row * in;
    for (int p0 = 0; p0 < pairs; p0 += chunk_pairs) {
      const int p1 = std::min(pairs, p0 + chunk_pairs);
      // Passes of up to four tokens over both blocks, eights over one (whole groups: the first
      // four over both).
      int pass = 0;
      for (int t0 = 0, n; t0 < tokens; t0 += n) {
        n = std::min(t0 == 0 && !chunked ? kBothBlocksTokens : kOneBlockTokens, tokens - t0);
        for (int t = 0; t < n; ++t) rows[t] = x + static_cast<size_t>(t0 + t) * PairRowStride(in);
        float* token_sums = sums.data() + static_cast<size_t>(t0) * kSumsPerToken;
        float* token_y = y + static_cast<size_t>(t0) * y_stride + row;
        if (n <= kBothBlocksTokens) {
          both_blocks[n](group, 0, p0, p1, pairs, rows, token_sums, token_y, y_stride, pass == 0);
          ++pass;
        } else {
          for (int block = 0; block < 2; ++block) {
            kOneBlock[n](group, block, p0, p1, pairs, rows, token_sums, token_y, y_stride, pass == 0);
            ++pass;
          }
        }
      }
    }
  }
}

void GroupRowsHiAvx512Bf16(const uint16_t* w, int in, const uint16_t* x, int tokens,
                           size_t row_begin, size_t row_end, float* y, size_t y_stride) {
  const int pairs = in / 2;
  const uint16_t* rows[kOneBlockTokens];
  for (size_t row = row_begin; row < row_end; row += kPairGroupRows) {
    const uint16_t* group = w + row * in;
    for (int t0 = 0, n; t0 < tokens; t0 += n) {
      n = std::min(kOneBlockTokens, tokens - t0);
      for (int t = 0; t < n; ++t) rows[t] = x + static_cast<size_t>(t0 + t) * PairRowStride(in);
      kHiPass[n](group, pairs, rows, y + static_cast<size_t>(t0) * y_stride + row, y_stride,
                 t0 == 0);
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
void GroupRowsAvx512Bf16(const uint16_t*, int, const uint16_t*, int, size_t, size_t, float*,
                         size_t) {}
void GroupRowsHiAvx512Bf16(const uint16_t*, int, const uint16_t*, int, size_t, size_t, float*,
                           size_t) {}

#endif

}  // namespace tpserve::cpu::dot
