// Internal to Linear (kernels/cpu/linear.cc): the per-instruction-set functions that compute the
// dot products of one bf16 weight row with 1..4 activation rows, and what they need. Each keeps
// the contract of linear.h: a token's result is the same instruction sequence whatever its batch
// mates (n), so batches are bitwise invariant.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tpserve::cpu::dot {

constexpr int kTokenTile = 4;  // tokens that share one pass over a weight row
// Software prefetch distance for weights (A/B on an AVX-512 machine: ~10% faster decode at 16 KiB).
constexpr int kPrefetchBytes = 16384;

// w: one weight row [in] bf16; x: n rows [in] of f32 (or bf16) activations; out: n dots.
using F32Fn = void (*)(const uint16_t* w, const float* const* x, int in, float* out);
using Bf16Fn = void (*)(const uint16_t* w, const uint16_t* const* x, int in, float* out);

template <typename Fn>
struct Table {
  Fn fn[kTokenTile + 1] = {};  // fn[n] for n tokens
};

// AVX2 + FMA (linear_avx2.cc): 8-lane f32 FMA on the weights widened to f32.
bool HasAvx2();
const Table<F32Fn>& Avx2();

// AVX-512 BF16 (linear_avx512bf16.cc): VDPBF16PS on bf16 pairs, each activation split once per
// call into two bf16 (SplitToBf16: out [tokens, 2, in], a row's hi parts then its lo parts); the
// table's x[t] is a token's hi row, its lo row follows it.
bool HasAvx512Bf16();
const Table<Bf16Fn>& Avx512Bf16();
void SplitToBf16(const float* x, int tokens, int in, uint16_t* out);

}  // namespace tpserve::cpu::dot
