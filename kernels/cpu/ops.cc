#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

namespace tpserve::cpu {

void RmsNorm(const float* x, const float* weight, float* y, int n, float eps) {
  double sum_sq = 0;
  for (int i = 0; i < n; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(sum_sq / n + eps));
  for (int i = 0; i < n; ++i) y[i] = x[i] * scale * weight[i];
}

namespace {

// exp on 16 floats at a time with GCC's vector extensions (one instruction per operation on
// AVX-512, four SSE ones elsewhere): Cephes' expf (x = n ln 2 + r, a degree-5 polynomial in r, 2^n
// built in the exponent bits; relative error ~1e-7), its argument clamped to [-87, 88.7] so that
// 2^n stays a normal float up to 2^128, whose bits are infinity (exp of anything past ~88.4 is
// infinity, as it should be). glibc's scalar expf took 3-4 ns an element: SiLU took a third of
// batch 8's non-Linear time on the default model. TPSERVE_DEFINE_ELEMENTWISE defines its users for
// each target; vectors pass through memory (a vector argument would change the ABI between
// targets).
using Float16 = float __attribute__((vector_size(64)));
using Int16 = int32_t __attribute__((vector_size(64)));

#define TPSERVE_DEFINE_EXP16(target_attribute, name)                                              \
  target_attribute __attribute__((always_inline)) inline void name(const float* in, float* out) { \
    Float16 x;                                                                                    \
    std::memcpy(&x, in, sizeof(x));                                                               \
    x = x < -87.0f ? Float16{} - 87.0f : (x > 88.7f ? Float16{} + 88.7f : x);                     \
    const Float16 fx = x * 1.44269504088896341f + 0.5f;                                           \
    Float16 whole = __builtin_convertvector(__builtin_convertvector(fx, Int16), Float16);         \
    whole = whole > fx ? whole - 1.0f : whole; /* floor */                                        \
    const Float16 r = x - whole * 0.693359375f - whole * -2.12194440e-4f;                         \
    Float16 y = 1.9875691500e-4f * r + 1.3981999507e-3f;                                          \
    y = y * r + 8.3334519073e-3f;                                                                 \
    y = y * r + 4.1665795894e-2f;                                                                 \
    y = y * r + 1.6666665459e-1f;                                                                 \
    y = y * r + 5.0000001201e-1f;                                                                 \
    y = y * r * r + r + 1.0f;                                                                     \
    const Int16 exponent = (__builtin_convertvector(whole, Int16) + 127) << 23;                   \
    Float16 two_to_n;                                                                             \
    std::memcpy(&two_to_n, &exponent, sizeof(two_to_n));                                          \
    y *= two_to_n;                                                                                \
    std::memcpy(out, &y, sizeof(y));                                                              \
  }

// Defines SiluMul<suffix> and ExpShifted<suffix> (ops.h's SiluMul and ExpShifted) for one target.
// Every element, the last partial 16 included (copied into a padded vector), goes through the same
// vector code, so an element's result does not depend on where a call's range starts.

#define TPSERVE_DEFINE_ELEMENTWISE(target_attribute, suffix)                                     \
  TPSERVE_DEFINE_EXP16(target_attribute, Exp16##suffix)                                          \
  target_attribute __attribute__((always_inline)) inline void SiluMul16##suffix(                 \
      const float* gate_in, const float* up_in, float* out) {                                    \
    Float16 gate, up, e;                                                                         \
    std::memcpy(&gate, gate_in, sizeof(gate));                                                   \
    std::memcpy(&up, up_in, sizeof(up));                                                         \
    const Float16 minus_gate = -gate;                                                            \
    Exp16##suffix(reinterpret_cast<const float*>(&minus_gate), reinterpret_cast<float*>(&e));    \
    const Float16 result = gate / (1.0f + e) * up;                                               \
    std::memcpy(out, &result, sizeof(result));                                                   \
  }                                                                                              \
  target_attribute void SiluMul##suffix(const float* gate, const float* up, float* out, int n) { \
    int i = 0;                                                                                   \
    for (; i + 16 <= n; i += 16) SiluMul16##suffix(gate + i, up + i, out + i);                   \
    if (i < n) {                                                                                 \
      float g[16] = {}, u[16] = {}, y[16];                                                       \
      std::copy(gate + i, gate + n, g);                                                          \
      std::copy(up + i, up + n, u);                                                              \
      SiluMul16##suffix(g, u, y);                                                                \
      std::copy_n(y, n - i, out + i);                                                            \
    }                                                                                            \
  }                                                                                              \
  /* x[i] = exp(x[i] - shift) */                                                                 \
  target_attribute void ExpShifted##suffix(float* x, int n, float shift) {                       \
    int i = 0;                                                                                   \
    for (; i + 16 <= n; i += 16) {                                                               \
      Float16 v;                                                                                 \
      std::memcpy(&v, x + i, sizeof(v));                                                         \
      v -= shift;                                                                                \
      Exp16##suffix(reinterpret_cast<const float*>(&v), x + i);                                  \
    }                                                                                            \
    if (i < n) {                                                                                 \
      float v[16] = {};                                                                          \
      for (int j = 0; j < n - i; ++j) v[j] = x[i + j] - shift;                                   \
      Exp16##suffix(v, v);                                                                       \
      std::copy_n(v, n - i, x + i);                                                              \
    }                                                                                            \
  }

TPSERVE_DEFINE_ELEMENTWISE(, Portable)
#if defined(__x86_64__)
TPSERVE_DEFINE_ELEMENTWISE(__attribute__((target("avx512f"))), Avx512)
#endif
#undef TPSERVE_DEFINE_ELEMENTWISE
#undef TPSERVE_DEFINE_EXP16

bool HasAvx512Foundation() {
#if defined(__x86_64__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512;
#else
  return false;
#endif
}

}  // namespace

void SiluMul(const float* gate, const float* up, float* out, int n) {
#if defined(__x86_64__)
  if (HasAvx512Foundation()) return SiluMulAvx512(gate, up, out, n);
#endif
  SiluMulPortable(gate, up, out, n);
}

void ExpShifted(float* x, int n, float shift) {
#if defined(__x86_64__)
  if (HasAvx512Foundation()) return ExpShiftedAvx512(x, n, shift);
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

// q · k over d elements in 16 lanes (four 4-float vectors; element i in lane i % 16), summed
// pairwise in one fixed order. One running sum would be a chain of d dependent adds per position,
// and lanes in a plain array were summed through the stack, each level waiting on the last.
using Float4 = float __attribute__((vector_size(16)));

Float4 LoadFloat4(const float* p) {
  Float4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

float DotLanes(const float* q, const float* k, int d) {
  Float4 acc[4] = {};
  int i = 0;
  for (; i + 16 <= d; i += 16) {
    for (int j = 0; j < 4; ++j) acc[j] += LoadFloat4(q + i + 4 * j) * LoadFloat4(k + i + 4 * j);
  }
  if (i < d) {  // a head_dim that is not a multiple of 16: the rest in lanes 0, 1, ...
    float lanes[16];
    std::memcpy(lanes, acc, sizeof(lanes));
    for (int j = 0; i < d; ++i, ++j) lanes[j] += q[i] * k[i];
    std::memcpy(acc, lanes, sizeof(lanes));
  }
  const Float4 sum = (acc[0] + acc[2]) + (acc[1] + acc[3]);  // lanes j + 8, then j + 4
  return (sum[0] + sum[2]) + (sum[1] + sum[3]);
}

}  // namespace

void AttendOneHead(const float* q, int head, int heads, const KvLayerView& kv,
                   const int32_t* block_table, int length, float scale, float* out, float* scores) {
  const int d = kv.head_dim;
  const int kv_head = head / (heads / kv.kv_heads);
  auto row = [&](const float* base, int position) {
    const int block = block_table[position / kv.block_size];
    const size_t slot = static_cast<size_t>(block) * kv.block_size + position % kv.block_size;
    return base + (slot * kv.kv_heads + kv_head) * d;
  };
  // A head's K and V rows are head_dim floats kv_heads apart: fetch each row a few positions
  // ahead (decode attention at context 512 on the small model: 1.5-1.6 ms a step against 2.0-2.7
  // without, interleaved runs).
  constexpr int kAhead = 8;
  auto prefetch_row = [&](const float* base, int position) {
    if (position >= length) return;
    const char* bytes = reinterpret_cast<const char*>(row(base, position));
    for (int offset = 0; offset < d * static_cast<int>(sizeof(float)); offset += 64) {
      __builtin_prefetch(bytes + offset);
    }
  };
  const float* qh = q + head * d;
  float max_score = -INFINITY;
  for (int p = 0; p < length; ++p) {
    prefetch_row(kv.keys, p + kAhead);
    scores[p] = DotLanes(qh, row(kv.keys, p), d) * scale;
    max_score = std::max(max_score, scores[p]);
  }
  ExpShifted(scores, length, max_score);
  double sum = 0;
  for (int p = 0; p < length; ++p) sum += scores[p];
  const float inv_sum = static_cast<float>(1.0 / sum);
  for (int p = 0; p < length; ++p) scores[p] *= inv_sum;  // the softmax weights
  // out = Σ_p weight_p · v_p, 16 output elements at a time over every position: the 16 sums stay in
  // registers (the whole head_dim row in memory made each position wait on the last one's stores).
  float* oh = out + head * d;
  for (int i0 = 0; i0 < d; i0 += 16) {
    float acc[16] = {};
    if (i0 + 16 <= d) {
      for (int p = 0; p < length; ++p) {
        if (i0 == 0) prefetch_row(kv.values, p + kAhead);  // later passes find the rows in cache
        const float* v = row(kv.values, p) + i0;
        for (int j = 0; j < 16; ++j) acc[j] += scores[p] * v[j];
      }
    } else {
      for (int p = 0; p < length; ++p) {
        const float* v = row(kv.values, p) + i0;
        for (int j = 0; j < d - i0; ++j) acc[j] += scores[p] * v[j];
      }
    }
    std::copy_n(acc, std::min(16, d - i0), oh + i0);
  }
}

void AttendOneToken(const float* q, int heads, const KvLayerView& kv, const int32_t* block_table,
                    int length, float scale, float* out, float* scores) {
  for (int h = 0; h < heads; ++h)
    AttendOneHead(q, h, heads, kv, block_table, length, scale, out, scores);
}

}  // namespace tpserve::cpu
