#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/simd16.h"

namespace tpserve::cpu {

namespace {

using simd16::Float16;


// SiLU(gate)·up and the softmax's exp on 16 floats at a time, glibc's scalar expf replaced by
// simd16::Exp (it took 3-4 ns an element: SiLU was a third of batch 8's non-Linear time on the
// default model). Every element, the last partial 16 included (copied into a padded vector),
// takes the same vector code, so its result does not depend on where a thread's range starts.
TPSERVE_SIMD16_INLINE void SiluMul16(const float* gate_in, const float* up_in, float* out) {
  const Float16 gate = simd16::Load(gate_in);
  simd16::Store(out, gate / (1.0f + simd16::Exp(-gate)) * simd16::Load(up_in));
}

TPSERVE_SIMD16_INLINE void SiluMulBody(const float* gate, const float* up, float* out, int n) {
  int i = 0;
  for (; i + 16 <= n; i += 16) SiluMul16(gate + i, up + i, out + i);
  if (i < n) {
    float g[16] = {}, u[16] = {}, y[16];
    std::copy(gate + i, gate + n, g);
    std::copy(up + i, up + n, u);
    SiluMul16(g, u, y);
    std::copy_n(y, n - i, out + i);
  }
}

TPSERVE_SIMD16_INLINE void ExpShiftedBody(float* x, int n, float shift) {
  int i = 0;
  for (; i + 16 <= n; i += 16) simd16::Store(x + i, simd16::Exp(simd16::Load(x + i) - shift));
  if (i < n) {
    float v[16] = {};
    std::copy(x + i, x + n, v);
    simd16::Store(v, simd16::Exp(simd16::Load(v) - shift));
    std::copy_n(v, n - i, x + i);
  }
}

// The sum of squares in float64, 16 elements a step into two 8-lane sums, then the lanes in order
// and the last n % 16 elements one by one. (One running sum was a chain of n dependent adds: 0.75
// us a row of the default model, 6 us a call at batch 8, on the thread the pool waits for.)
TPSERVE_SIMD16_INLINE void RmsNormBody(const float* x, const float* weight, float* y, int n,
                                       float eps) {
  using Double8 = double __attribute__((vector_size(64)));
  Double8 low = {}, high = {};
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const Float16 v = simd16::Load(x + i);
    const Double8 a = __builtin_convertvector(__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7), Double8);
    const Double8 b =
        __builtin_convertvector(__builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15), Double8);
    low += a * a;
    high += b * b;
  }
  const Double8 lanes = low + high;
  double sum_sq = 0;
  for (int j = 0; j < 8; ++j) sum_sq += lanes[j];
  for (int j = i; j < n; ++j) sum_sq += static_cast<double>(x[j]) * x[j];
  const float scale = static_cast<float>(1.0 / std::sqrt(sum_sq / n + eps));
  for (i = 0; i + 16 <= n; i += 16) {
    simd16::Store(y + i, simd16::Load(x + i) * scale * simd16::Load(weight + i));
  }
  for (; i < n; ++i) y[i] = x[i] * scale * weight[i];
}

void RmsNormPortable(const float* x, const float* weight, float* y, int n, float eps) {
  RmsNormBody(x, weight, y, n, eps);
}
void SiluMulPortable(const float* gate, const float* up, float* out, int n) {
  SiluMulBody(gate, up, out, n);
}
void ExpShiftedPortable(float* x, int n, float shift) {
  ExpShiftedBody(x, n, shift);
}
#if defined(__x86_64__)
__attribute__((target("avx512f"))) void RmsNormAvx512(const float* x, const float* weight, float* y,
                                                      int n, float eps) {
  RmsNormBody(x, weight, y, n, eps);
}
__attribute__((target("avx512f"))) void SiluMulAvx512(const float* gate, const float* up,
                                                      float* out, int n) {
  SiluMulBody(gate, up, out, n);
}
__attribute__((target("avx512f"))) void ExpShiftedAvx512(float* x, int n, float shift) {
  ExpShiftedBody(x, n, shift);
}
#endif

}  // namespace

void RmsNorm(const float* x, const float* weight, float* y, int n, float eps) {
#if defined(__x86_64__)
  if (HasAvx512F()) return RmsNormAvx512(x, weight, y, n, eps);
#endif
  RmsNormPortable(x, weight, y, n, eps);
}

void SiluMul(const float* gate, const float* up, float* out, int n) {
#if defined(__x86_64__)
  if (HasAvx512F()) return SiluMulAvx512(gate, up, out, n);
#endif
  SiluMulPortable(gate, up, out, n);
}

void ExpShifted(float* x, int n, float shift) {
#if defined(__x86_64__)
  if (HasAvx512F()) return ExpShiftedAvx512(x, n, shift);
#endif
  ExpShiftedPortable(x, n, shift);
}

void AddInPlace(float* x, const float* y, int n) {
  for (int i = 0; i < n; ++i) x[i] += y[i];
}

std::vector<double> RopeInverseFrequencies(const RopeParams& p) {
  const int pairs = p.head_dim / 2;
  std::vector<double> inv_freq(pairs);
  for (int i = 0; i < pairs; ++i) {
    inv_freq[i] = 1.0 / std::pow(p.theta, (2.0 * i) / p.head_dim);
  }
  if (p.scaling == RopeParams::Scaling::kLinear) {
    for (double& f : inv_freq) f /= p.factor;
  } else if (p.scaling == RopeParams::Scaling::kLlama3) {
    // Llama-3.1: keep high frequencies, divide low ones by `factor`, blend in between.
    const double old_context = p.original_max_position_embeddings;
    const double low_freq_wavelen = old_context / p.low_freq_factor;
    const double high_freq_wavelen = old_context / p.high_freq_factor;
    for (double& f : inv_freq) {
      const double wavelen = 2 * std::numbers::pi / f;
      if (wavelen < high_freq_wavelen) continue;
      if (wavelen > low_freq_wavelen) {
        f /= p.factor;
      } else {
        const double smooth =
            (old_context / wavelen - p.low_freq_factor) / (p.high_freq_factor - p.low_freq_factor);
        f = (1 - smooth) * f / p.factor + smooth * f;
      }
    }
  }
  return inv_freq;
}

void RopeAngles(const std::vector<double>& inv_freq, int position, float* cos, float* sin) {
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const double angle = position * inv_freq[i];
    cos[i] = static_cast<float>(std::cos(angle));
    sin[i] = static_cast<float>(std::sin(angle));
  }
}

void ApplyRope(float* x, int heads, int head_dim, const float* cos, const float* sin) {
  const int half = head_dim / 2;
  for (int h = 0; h < heads; ++h) {
    float* v = x + h * head_dim;
    for (int i = 0; i < half; ++i) {
      const float a = v[i], b = v[i + half];
      v[i] = a * cos[i] - b * sin[i];
      v[i + half] = b * cos[i] + a * sin[i];
    }
  }
}

namespace {

// q · k over d elements in 16 lanes (element i in lane i % 16), summed in simd16::Sum's fixed
// order. One running sum would be a chain of d dependent adds per position.
TPSERVE_SIMD16_INLINE float DotLanes(const float* q, const float* k, int d) {
  Float16 acc = {};
  int i = 0;
  for (; i + 16 <= d; i += 16) acc += simd16::Load(q + i) * simd16::Load(k + i);
  if (i < d) {  // a head_dim that is not a multiple of 16: the rest in lanes 0, 1, ...
    float lanes[16];
    std::memcpy(lanes, &acc, sizeof(lanes));
    for (int j = 0; i < d; ++i, ++j) lanes[j] += q[i] * k[i];
    std::memcpy(&acc, lanes, sizeof(lanes));
  }
  return simd16::Sum(acc);
}

// Calls fn(p, row) for positions p in [0, length) with `row` the head's K or V row at p: the
// block table is read once a block, and the next block's rows are prefetched when a block starts.
// (A division and a remainder per position, seven a position over the K and V loops, cost more
// than the arithmetic: decode attention at batch 8 on the small model took 45 us a layer.)
template <typename Fn>
TPSERVE_SIMD16_INLINE void ForEachHeadRow(const float* base, const KvLayerView& kv, int kv_head,
                                          const int32_t* block_table, int length, bool prefetch,
                                          Fn&& fn) {
  const size_t row_stride = static_cast<size_t>(kv.kv_heads) * kv.head_dim;
  const int row_bytes = kv.head_dim * static_cast<int>(sizeof(float));
  auto block_rows = [&](int block) {
    return base + static_cast<size_t>(block_table[block]) * kv.block_size * row_stride +
           static_cast<size_t>(kv_head) * kv.head_dim;
  };
  const int blocks = (length + kv.block_size - 1) / kv.block_size;
  for (int b = 0, p = 0; b < blocks; ++b) {
    if (prefetch && b + 1 < blocks) {
      const int next_rows = std::min(kv.block_size, length - (b + 1) * kv.block_size);
      const char* next = reinterpret_cast<const char*>(block_rows(b + 1));
      for (int r = 0; r < next_rows; ++r, next += row_stride * sizeof(float)) {
        for (int offset = 0; offset < row_bytes; offset += 64) __builtin_prefetch(next + offset);
      }
    }
    const float* row = block_rows(b);
    for (const int end = std::min(length, p + kv.block_size); p < end; ++p, row += row_stride) {
      fn(p, row);
    }
  }
}

TPSERVE_SIMD16_INLINE void AttendOneHeadBody(const float* q, int head, int heads,
                                             const KvLayerView& kv, const int32_t* block_table,
                                             int length, float scale, float* out, float* scores) {
  const int d = kv.head_dim;
  const int kv_head = head / (heads / kv.kv_heads);
  // K and V rows are fetched a block (16 positions by default) ahead: decode attention at context
  // 512 on the small model took 1.5-1.6 ms a step with a few rows ahead, 2.0-2.7 without.
  const float* qh = q + head * d;
  float max_score = -INFINITY;
  ForEachHeadRow(kv.keys, kv, kv_head, block_table, length, /*prefetch=*/true,
                 [&](int p, const float* k) {
                   scores[p] = DotLanes(qh, k, d) * scale;
                   max_score = std::max(max_score, scores[p]);
                 });
  ExpShiftedBody(scores, length, max_score);
  double sum = 0;
  for (int p = 0; p < length; ++p) sum += scores[p];
  const float inv_sum = static_cast<float>(1.0 / sum);
  for (int p = 0; p < length; ++p) scores[p] *= inv_sum;  // the softmax weights
  // out = Σ_p weight_p · v_p, 64 output elements (four 16-lane sums in registers) at a time over
  // every position: each element's sum runs over the positions in order, in a register (the whole
  // head_dim row in memory made each position wait on the last one's stores), and four chains
  // side by side hide the adds' latency (one 16-lane chain a pass took 0.1 us of a head's 0.5).
  float* oh = out + head * d;
  constexpr int kVectors = 4;
  for (int i0 = 0; i0 < d; i0 += 16 * kVectors) {
    const bool first_pass = i0 == 0;  // later passes find the rows in cache
    const int width = std::min(16 * kVectors, d - i0);
    if (width % 16 == 0) {
      Float16 acc[kVectors] = {};
      const int vectors = width / 16;
      ForEachHeadRow(kv.values, kv, kv_head, block_table, length, first_pass,
                     [&](int p, const float* v) {
                       for (int j = 0; j < kVectors; ++j) {
                         if (j < vectors) acc[j] += scores[p] * simd16::Load(v + i0 + 16 * j);
                       }
                     });
      for (int j = 0; j < vectors; ++j) simd16::Store(oh + i0 + 16 * j, acc[j]);
    } else {
      float acc[16 * kVectors] = {};
      ForEachHeadRow(kv.values, kv, kv_head, block_table, length, first_pass,
                     [&](int p, const float* v) {
                       for (int j = 0; j < width; ++j) acc[j] += scores[p] * v[i0 + j];
                     });
      std::copy_n(acc, width, oh + i0);
    }
  }
}

void AttendOneHeadPortable(const float* q, int head, int heads, const KvLayerView& kv,
                           const int32_t* block_table, int length, float scale, float* out,
                           float* scores) {
  AttendOneHeadBody(q, head, heads, kv, block_table, length, scale, out, scores);
}
#if defined(__x86_64__)
__attribute__((target("avx512f"))) void AttendOneHeadAvx512(const float* q, int head, int heads,
                                                            const KvLayerView& kv,
                                                            const int32_t* block_table, int length,
                                                            float scale, float* out,
                                                            float* scores) {
  AttendOneHeadBody(q, head, heads, kv, block_table, length, scale, out, scores);
}
#endif

}  // namespace

void AttendOneHead(const float* q, int head, int heads, const KvLayerView& kv,
                   const int32_t* block_table, int length, float scale, float* out, float* scores) {
#if defined(__x86_64__)
  if (HasAvx512F())
    return AttendOneHeadAvx512(q, head, heads, kv, block_table, length, scale, out, scores);
#endif
  AttendOneHeadPortable(q, head, heads, kv, block_table, length, scale, out, scores);
}

void AttendOneToken(const float* q, int heads, const KvLayerView& kv, const int32_t* block_table,
                    int length, float scale, float* out, float* scores) {
  for (int h = 0; h < heads; ++h)
    AttendOneHead(q, h, heads, kv, block_table, length, scale, out, scores);
}

}  // namespace tpserve::cpu
