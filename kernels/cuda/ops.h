// The element-wise and per-token ops of a Llama decoder on a GPU: the CUDA twins of
// kernels/cpu/ops.h. No CUDA headers: every pointer is device memory and `stream` is a
// cudaStream_t; each call enqueues its kernel on the stream and returns the launch status.
//
// Reductions (the norms) run in an order fixed by the row length alone (one thread block per
// row, a fixed tree), so a token's result never depends on its batch mates.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace tpserve::cuda {

// y[r] = x[r] / sqrt(mean(x[r]²) + eps) * weight, for `rows` rows of `n`.
//   x, y: [rows, n] f32; weight: [n] f32.
Status RmsNorm(const float* x, const float* weight, float* y, int rows, int n, float eps, void* stream);

// The residual add fused with the next norm: residual += delta; y = RmsNorm(residual).
//   residual, delta, y: [rows, n] f32; weight: [n] f32.
Status AddRmsNorm(float* residual, const float* delta, const float* weight, float* y, int rows, int n, float eps,
                  void* stream);

// out[i] = silu(gate[i]) * up[i].  gate, up, out: [n] f32.
Status SiluMul(const float* gate, const float* up, float* out, size_t n, void* stream);

// Rotate-half RoPE of x: [tokens, heads, head_dim] f32 in place; token t is at positions[t]
// ([tokens] int32); inv_freq: [head_dim / 2] f64 (scaling applied, cpu::RopeInverseFrequencies).
// Angles are computed in double, as the CPU does.
Status ApplyRope(float* x, const int32_t* positions, const double* inv_freq, int tokens, int heads, int head_dim,
                 void* stream);

// Vocab-parallel embedding: out[t] = table[ids[t] - vocab_begin] when this rank holds that row
// (vocab_begin <= id < vocab_begin + vocab_rows), else zeros (the AllReduce fills it in).
//   table: [vocab_rows, hidden] bf16 bits; ids: [tokens] int32; out: [tokens, hidden] f32.
Status EmbeddingGather(const uint16_t* table, const int32_t* ids, float* out, int tokens, int hidden,
                       int vocab_begin, int vocab_rows, void* stream);

}  // namespace tpserve::cuda
