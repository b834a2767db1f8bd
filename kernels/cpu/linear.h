// y = x · Wᵀ (+ bias) with bf16 weights in Hugging Face's [out_features, in_features] layout,
// f32 activations and f32 accumulation: the GEMV/GEMM of every projection on the CPU backend.
//
// Batch invariance: every output element y[t, o] is the dot product of row t of x and row o of W
// computed by the same instruction sequence (16-lane partial sums over `in` in order, then one
// fixed horizontal reduction), whatever the number of tokens, the tiling or the thread count.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tpserve::cpu {

class ThreadPool;

struct LinearArgs {
  const float* x = nullptr;       // [tokens, in]
  const uint16_t* w = nullptr;    // [out, in] bf16
  const float* bias = nullptr;    // [out] or nullptr
  float* y = nullptr;             // [tokens, out]
  int tokens = 0;
  int in = 0;
  int out = 0;
};

void Linear(const LinearArgs& args, ThreadPool* pool);

// Whether the AVX-512 kernel runs on this CPU (else a portable kernel with the same lane
// structure; both are deterministic).
bool LinearUsesAvx512();

}  // namespace tpserve::cpu
