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

// y = bf16(x), rounded to nearest even as F32ToBF16 does (common/dtype.h): the GEMM inputs.
//   x: [n] f32; y: [n] bf16 bits.
Status CastToBf16(const float* x, uint16_t* y, size_t n, void* stream);

// y[r] += bias for each of `rows` rows.  y: [rows, n] f32; bias: [n] f32.
Status AddBias(float* y, const float* bias, int rows, int n, void* stream);

// out[r] = silu(gate[r]) * up[r] from the stacked gate/up projection, rounded to bf16 for the
// down projection.  gate_up: [rows, 2 * n] f32 (gate, then up); out: [rows, n] bf16 bits.
Status SiluMulRowsToBf16(const float* gate_up, uint16_t* out, int rows, int n, void* stream);

// ApplyRope on the first `heads` heads of each row of a wider matrix (q or k inside the stacked
// QKV projection).  x: [tokens, row_stride] f32, the heads at column `offset`.
Status ApplyRopeStrided(float* x, int row_stride, int offset, const int32_t* positions, const double* inv_freq,
                        int tokens, int heads, int head_dim, void* stream);

// Writes each token's keys and values into its KV slot (PackedStep::slot_mapping).
//   qkv: [tokens, row_stride] f32, keys at column k_offset, values at v_offset, `kv_width` each;
//   slots: [tokens] int32, -1 for a row that writes nothing (padding); key_cache, value_cache:
//   [slots, kv_width] f32.
Status WriteKv(const float* qkv, int row_stride, int k_offset, int v_offset, int kv_width, const int32_t* slots,
               float* key_cache, float* value_cache, int tokens, void* stream);

// out[r] = x[rows[r]]: the tokens whose logits are wanted.
//   x: [tokens, n] f32; rows: [count] int32; out: [count, n] f32.
Status GatherRows(const float* x, const int32_t* rows, float* out, int count, int n, void* stream);

// Loads these kernels now (kernels/cuda/preload.cuh says why).
Status PreloadOpsKernels();

}  // namespace tpserve::cuda
