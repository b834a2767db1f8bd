// Internal to Linear (kernels/cpu/linear.cc): the per-instruction-set functions that compute the
// dot products of one bf16 weight row with 1..4 activation rows, and what they need. Each keeps
// the contract of linear.h: a token's result is the same instruction sequence whatever its batch
// mates (n), so batches are bitwise invariant.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/stream_prefetch.h"
#include "kernels/cpu/x86_intrinsics.h"

namespace tpserve::cpu::dot {

constexpr int kTokenTile = 4;  // tokens that share one pass over a weight row

// w: `rows` consecutive weight rows [rows, in] bf16; x: n rows [in] of f32 (or bf16) activations;
// out[t * out_stride + r]: row r's dot with x[t]. A call covers a block of rows, so the row loop
// can run inside the instruction set's own code (a plain per-row sum called through a pointer read
// the LM head at 79-84% of a flat read, inlined over the range at 93-97%: docs/PERFORMANCE.md).
// `prefetch`: kPageStarts where one token streams the rows, kEveryLine for more tokens
// (stream_prefetch.h).
using F32Fn = void (*)(const uint16_t* w, size_t rows, const float* const* x, int in, float* out,
                       size_t out_stride, StreamPrefetch prefetch);
using Bf16Fn = void (*)(const uint16_t* w, size_t rows, const uint16_t* const* x, int in, float* out,
                        size_t out_stride, StreamPrefetch prefetch);

template <typename Fn>
struct Table {
  Fn fn[kTokenTile + 1] = {};  // fn[n] for n tokens
  // Rows per call when all tokens fit one tile (more tokens: blocks of 32 rows, each passed over by
  // every tile while in cache). Measured per kernel at one token on AMD EPYC (Zen 5):
  // bench_linear, docs/PERFORMANCE.md.
  size_t rows_per_call = SIZE_MAX;
  // How one token's pass prefetches the rows (more tokens: kEveryLine). Page starts alone suit a
  // pass with few instructions per line (perhaps because it keeps enough loads in flight by
  // itself); AVX2's widening takes about twice AVX-512's per line, and every line prefetched ran
  // its batch-1 decode at 0.86-0.96 of the paired read against 0.76-0.84 (9 of 9 alternated pairs),
  // where the AVX-512 row kernel ran 1-2 points slower with it (4 of 4; docs/PERFORMANCE.md,
  // session 35).
  StreamPrefetch one_token_prefetch = StreamPrefetch::kPageStarts;
};

// AVX2 + FMA (linear_avx2.cc; cpu::HasAvx2Fma): 8-lane f32 FMA on the weights widened to f32,
// each 16 as its even and its odd elements. The table's x[t] is a token's row from PermuteForAvx2:
// [Avx2RowStride(in)] f32, each 16-element group's even elements, then its odd ones, 0 past in.
const Table<F32Fn>& Avx2();
constexpr size_t Avx2RowStride(int in) { return (static_cast<size_t>(in) + 15) / 16 * 16; }
void PermuteForAvx2(const float* x, int tokens, int in, float* out);

// AVX-512 BF16 (linear_avx512bf16.cc): VDPBF16PS on bf16 pairs, each activation split once per
// call into two bf16 (SplitToBf16: out [tokens, 2, in], a row's hi parts then its lo parts); the
// table's x[t] is a token's hi row, its lo row follows it. Where cpu::HasAvx512Bf16.
const Table<Bf16Fn>& Avx512Bf16();
void SplitToBf16(const float* x, int tokens, int in, uint16_t* out);

// The same kernel's group path, on weights in WeightLayout::kPairGroups (groups of 32 rows, each
// [in / 2 pairs][2 blocks of 16 outputs][2] bf16; in % 32 == 0): outputs [row_begin, row_end)
// (whole groups) of `tokens` activation rows into y[t * y_stride + row]. x: SplitToBf16Pairs's
// rows, PairRowStride(in) apart, each [in / 2 pairs][hi pair, lo pair] bf16. A row is padded by one
// cache line so that a batch's rows do not all start at the same offset in a 4 KiB page: at
// in = 2048 they did, the eight rows a pass reads shared one set of the L1 cache, and bench_linear
// at 8 tokens ran 30% slower there than at in = 768.
constexpr int kPairGroupRows = 32;
constexpr size_t PairRowStride(int in) {
  return 2 * static_cast<size_t>(in) + 32;
}
void SplitToBf16Pairs(const float* x, int tokens, int in, uint16_t* out);
void GroupRowsAvx512Bf16(const uint16_t* w, int in, const uint16_t* x, int tokens,
                         size_t row_begin, size_t row_end, float* y, size_t y_stride);
// The same outputs from the hi parts alone (W·hi, not W·hi + W·lo), rounded otherwise: the
// screening pass of a greedy LM head (greedy_linear.h), half the arithmetic of the exact pass.
void GroupRowsHiAvx512Bf16(const uint16_t* w, int in, const uint16_t* x, int tokens,
                           size_t row_begin, size_t row_end, float* y, size_t y_stride);

}  // namespace tpserve::cpu::dot
