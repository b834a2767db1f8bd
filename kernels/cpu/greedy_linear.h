// The greedy token of each row of an LM head, found without every logit at full precision.
//
// Greedy sampling needs only the first index of each row's largest logit. With AVX-512 BF16 the
// exact LM head (Linear) takes two VDPBF16PS per weight and token, one for each bf16 half of the
// activation (hi + lo: linear_avx512bf16.cc), so at batch 8 it is bound by arithmetic, not by its
// 197 MB read. GreedyLinear first computes every output from the hi halves alone (one VDPBF16PS,
// no permutes: memory-bound again), with a bound on how far that can be from the exact output:
//
//   |exact(t, o) - screened(t, o)| <= |W[o]·lo[t]| + rounding of both
//                                  <= |W[o]|₂ · (|lo[t]|₂ (1 + 3γ) + 3γ |hi[t]|₂) + tiny terms
//
// (Cauchy-Schwarz; γ = (in + 8) u / (1 - (in + 8) u), u = 2⁻²⁴, the error of the ≤ in + 2 roundings
// of each f32 sum; the tiny terms cover flushed denormals), where |W[o]|₂ is precomputed per row
// (RowNormBounds). Every output whose upper bound reaches the largest lower bound of its token is
// a candidate; each candidate's 32-row group is then computed by the exact pass for that token
// alone, which gives the same bits as the whole Linear (batch invariance, linear.h). Any output
// left out is below the exact value of the candidate that set the largest lower bound, so the
// first largest among the candidates is the first largest of Linear's outputs: the same id, not an
// approximation. For activations of unit scale |lo|₂ is ~2⁻⁹ of the activation's norm, so the
// candidates are the few outputs within ~0.1% of |W[o]|₂|x|₂ of the largest.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/linear.h"

namespace tpserve::cpu {

// Upper bounds on the Euclidean norms of the rows of w [out, in] (bf16, in `layout`).
struct RowNorms {
  std::vector<float> bounds;  // [out], each at least its row's norm
  float largest = 0;          // the largest bound (+inf if a weight is not finite)
};
RowNorms RowNormBounds(const uint16_t* w, int out, int in, WeightLayout layout, ThreadPool* pool);

// Whether GreedyLinear screens on `kernel` and `layout`; where it does not, it is Linear and a
// scan.
bool GreedyLinearScreens(LinearKernel kernel, WeightLayout layout);

struct GreedyLinearArgs {
  const float* x = nullptr;     // [tokens, in]
  const uint16_t* w = nullptr;  // [out, in] bf16, in `layout`
  int tokens = 0;
  int in = 0;
  int out = 0;
  WeightLayout layout = WeightLayout::kRowMajor;
  const RowNorms* norms = nullptr;  // RowNormBounds(w); without them (or of another size), a scan
  // Token t may not take banned_ids[banned_offsets[t], banned_offsets[t + 1]) (ascending); nullptr:
  // nothing banned.
  const int32_t* banned_offsets = nullptr;  // [tokens + 1]
  const int32_t* banned_ids = nullptr;
};

struct GreedyLinearStats {
  int64_t candidates = 0;        // outputs computed exactly, over all tokens
  int64_t unsettled_tokens = 0;  // tokens given -1
};

// Beyond this many candidates a token is left to the caller (-1): each costs one group's exact
// pass at one token (48 KB of weights at in = 768), and this many mean the screen was no use.
inline constexpr int kMaxGreedyCandidates = 64;

// ids[t] = the first o, not banned for token t, with the largest y[t, o] of
// Linear({x, w, ..., layout}, pool, kernel), bitwise as a scan of Linear's outputs would find it;
// or -1 where that is not settled here: an activation or weight that is not finite, outputs that
// could overflow, every output banned, or more than kMaxGreedyCandidates candidates. The caller
// computes those tokens' logits itself.
void GreedyLinear(const GreedyLinearArgs& args, ThreadPool* pool, LinearKernel kernel, int32_t* ids,
                  GreedyLinearStats* stats = nullptr);

}  // namespace tpserve::cpu
