// The element-wise and per-token ops of a Llama decoder on the CPU backend. Every reduction
// (norms, attention scores, softmax) runs in a fixed order that depends only on the model's
// shapes and the token's own context length, never on the batch (see linear.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tpserve::cpu {

// y = x / sqrt(mean(x²) + eps) * weight, for one row of `n`. Sum of squares in double.
void RmsNorm(const float* x, const float* weight, float* y, int n, float eps);

// out[i] = silu(gate[i]) * up[i]
void SiluMul(const float* gate, const float* up, float* out, int n);

// x[i] = exp(x[i] - shift): the softmax's numerators (relative error ~1e-7; ops.cc).
void ExpShifted(float* x, int n, float shift);

// x += y
void AddInPlace(float* x, const float* y, int n);

// Rotary position embedding parameters (plain numbers, so kernels/ needs nothing from model/).
struct RopeParams {
  int head_dim = 0;
  double theta = 10000.0;
  enum class Scaling { kNone, kLinear, kLlama3 } scaling = Scaling::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_position_embeddings = 8192;
};

// Inverse frequencies of a head's rotary pairs (head_dim / 2 of them), scaling applied.
std::vector<double> RopeInverseFrequencies(const RopeParams& params);

// cos/sin of position * inv_freq[i]: [head_dim / 2] each.
void RopeAngles(const std::vector<double>& inv_freq, int position, float* cos, float* sin);

// Rotates each head of x ([heads, head_dim]) in Hugging Face's rotate-half layout: element i
// pairs with element i + head_dim / 2.
void ApplyRope(float* x, int heads, int head_dim, const float* cos, const float* sin);

// The KV cache's element type. kF32: the activations' own (what the CUDA backend keeps). kBf16:
// half the bytes, so twice the positions in the same memory and half the reads of a long
// context's attention; each element rounded to nearest even when stored and widened exactly when
// read (the arithmetic stays f32).
enum class KvDtype { kF32, kBf16 };

// "f32", "bf16"
const char* KvDtypeName(KvDtype dtype);
// The dtype KvDtypeName names ("f32", "bf16"); an error naming the others for anything else.
Result<KvDtype> ParseKvDtype(std::string_view name);
size_t KvDtypeBytes(KvDtype dtype);

// One layer's paged KV cache of one rank, as attention reads it. Head-major within a block: a KV
// head's rows for the block's positions lie together (block_size × head_dim elements), so the
// attention of one KV head reads them as one run instead of one row in every kv_heads (decode
// attention 1.27-1.51x faster at 512-2048 positions, 1.03-1.08x at 32: docs/PERFORMANCE.md).
struct KvLayerView {
  const void* keys = nullptr;    // [num_blocks, kv_heads, block_size, head_dim] of `dtype`
  const void* values = nullptr;  // [num_blocks, kv_heads, block_size, head_dim] of `dtype`
  int block_size = 0;
  int kv_heads = 0;
  int head_dim = 0;
  KvDtype dtype = KvDtype::kF32;

  // Where KV head `kv_head`'s row for position `slot` of block `block` starts, in elements: the
  // one place the layout is written down (the cache writes and attention reads through it).
  size_t RowOffset(int32_t block, int kv_head, int slot) const {
    return ((static_cast<size_t>(block) * kv_heads + kv_head) * block_size + slot) * head_dim;
  }
};

// Causal attention of one query token over positions [0, length) of its sequence:
// out[h] = softmax(q[h] · K[kv(h)]ᵀ * scale) · V[kv(h)], with kv(h) = h / (heads / kv_heads).
// q, out: [heads, head_dim]; block_table maps position / block_size to a block id;
// scores: scratch of at least min(heads / kv_heads, kMaxHeadsPerPass) × length floats.
void AttendOneToken(const float* q, int heads, const KvLayerView& kv, const int32_t* block_table,
                    int length, float scale, float* out, float* scores);

// AttendOneToken's query heads [first_head, first_head + count) alone (of `heads`; all of one KV
// head's group): writes out[h * head_dim, + head_dim) for those h. Up to kMaxHeadsPerPass heads
// share each pass over the group's K and V rows, which are read once for them. A head's result
// does not depend on `count` or on which heads share its pass. The unit a rank's threads split
// decode attention into. scores: scratch of min(count, kMaxHeadsPerPass) × length floats.
inline constexpr int kMaxHeadsPerPass = 4;
void AttendHeads(const float* q, int first_head, int count, int heads, const KvLayerView& kv,
                 const int32_t* block_table, int length, float scale, float* out, float* scores);

}  // namespace tpserve::cpu
