#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <string>

#include "common/dtype.h"
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

// A KV cache element as f32: f32 as it is, bf16 widened (exact). Sixteen at a time, or one.
TPSERVE_SIMD16_INLINE Float16 LoadKv(const float* p) {
  return simd16::Load(p);
}
TPSERVE_SIMD16_INLINE Float16 LoadKv(const uint16_t* p) {
  return simd16::LoadBf16(p);
}
TPSERVE_SIMD16_INLINE float KvElement(float v) {
  return v;
}
TPSERVE_SIMD16_INLINE float KvElement(uint16_t bits) {
  return BF16ToF32(bits);
}

// q · k over d elements in 16 lanes (element i in lane i % 16), not yet summed: SumLanesOf16
// reduces sixteen positions' lanes together. The same products and sums for either element type.
template <typename Element>
TPSERVE_SIMD16_INLINE Float16 DotLanes(const float* q, const Element* k, int d) {
  Float16 acc = {};
  int i = 0;
  for (; i + 16 <= d; i += 16) acc += simd16::Load(q + i) * LoadKv(k + i);
  if (i < d) {  // a head_dim that is not a multiple of 16: the rest in lanes 0, 1, ...
    float lanes[16];
    std::memcpy(lanes, &acc, sizeof(lanes));
    for (int j = 0; i < d; ++i, ++j) lanes[j] += q[i] * KvElement(k[i]);
    std::memcpy(&acc, lanes, sizeof(lanes));
  }
  return acc;
}

// Sixteen vectors' lane sums as one vector: out[j] = Σ_l v[j][l], by halves (lane l with l + 8,
// then l + 4, l + 2, l + 1), two vectors at a time. Every position's sum takes the same tree
// whichever of the 16 slots it has, so a score does not depend on its neighbours. (One horizontal
// sum per position, extracts and scalar adds, was most of a head's time with its rows in cache.)
TPSERVE_SIMD16_INLINE Float16 SumLanesOf16(const Float16 (&v)[16]) {
  Float16 halves[8], quarters[4], eighths[2];
  for (int i = 0; i < 8; ++i) {  // lanes 0-7: v[2i]'s l + (l + 8); lanes 8-15: v[2i + 1]'s
    const Float16 a = v[2 * i], b = v[2 * i + 1];
    halves[i] = __builtin_shufflevector(a, b, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
                __builtin_shufflevector(a, b, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  }
  for (int i = 0; i < 4; ++i) {  // four lanes per position, positions 4i .. 4i + 3
    const Float16 a = halves[2 * i], b = halves[2 * i + 1];
    quarters[i] = __builtin_shufflevector(a, b, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +
                  __builtin_shufflevector(a, b, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
  }
  for (int i = 0; i < 2; ++i) {  // two lanes per position, positions 8i .. 8i + 7
    const Float16 a = quarters[2 * i], b = quarters[2 * i + 1];
    eighths[i] = __builtin_shufflevector(a, b, 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29) +
                 __builtin_shufflevector(a, b, 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
  }
  const Float16 a = eighths[0], b = eighths[1];
  return __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30) +
         __builtin_shufflevector(a, b, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
}

// One KV head's K or V rows in position order: the block table is read once a block, and only
// for the blocks reached. (A division and a remainder per position cost more than the arithmetic:
// decode attention at batch 8 on the small model took 45 us a layer.)
template <typename Element>
class HeadRows {
 public:
  HeadRows(const void* base, const KvLayerView& kv, int kv_head, const int32_t* block_table)
      : base_(static_cast<const Element*>(base) + kv.RowOffset(0, kv_head, 0)),
        block_elements_(kv.RowOffset(1, 0, 0)),
        row_stride_(kv.RowOffset(0, 0, 1)),
        block_size_(kv.block_size),
        block_table_(block_table) {}
  // The next position's row.
  TPSERVE_SIMD16_INLINE const Element* Next() {
    if (left_in_block_ == 0) {
      row_ = base_ + static_cast<size_t>(block_table_[++block_]) * block_elements_;
      left_in_block_ = block_size_;
    }
    --left_in_block_;
    const Element* row = row_;
    row_ += row_stride_;
    return row;
  }

 private:
  const Element* base_;
  size_t block_elements_, row_stride_;
  int block_size_;
  const int32_t* block_table_;
  const Element* row_ = nullptr;
  int block_ = -1, left_in_block_ = 0;
};

// Walks a head's K rows and then its V rows kAhead rows before the arithmetic, prefetching each
// row's lines (Step once a row consumed): a KV head's rows run together only within a block
// (4 KiB at 16 positions, head_dim 64, f32), and the blocks lie wherever the pool put them, so
// the hardware, which follows a run, stalls at every block's start. (One block ahead, as before,
// left a cold layer's attention waiting on DRAM.)
template <typename Element>
class RowPrefetcher {
 public:
  static constexpr int kAhead = 32;
  RowPrefetcher(const KvLayerView& kv, int kv_head, const int32_t* block_table, int length)
      : keys_(kv.keys, kv, kv_head, block_table),
        values_(kv.values, kv, kv_head, block_table),
        keys_left_(length),
        values_left_(length),
        row_bytes_(kv.head_dim * static_cast<int>(sizeof(Element))) {
    for (int i = 0; i < kAhead; ++i) Step();
  }
  TPSERVE_SIMD16_INLINE void Step() {
    if (keys_left_ > 0) {
      --keys_left_;
      Fetch(keys_.Next());
    } else if (values_left_ > 0) {
      --values_left_;
      Fetch(values_.Next());
    }
  }

 private:
  TPSERVE_SIMD16_INLINE void Fetch(const Element* row) const {
    const char* bytes = reinterpret_cast<const char*>(row);
    for (int offset = 0; offset < row_bytes_; offset += 64) __builtin_prefetch(bytes + offset);
  }
  HeadRows<Element> keys_, values_;
  int keys_left_, values_left_, row_bytes_;
};

// Sixteen lanes of x at a time, the last partial 16 padded with `pad`.
TPSERVE_SIMD16_INLINE Float16 LoadPadded(const float* x, int n, float pad) {
  if (n >= 16) return simd16::Load(x);
  float lanes[16];
  for (int i = 0; i < 16; ++i) lanes[i] = i < n ? x[i] : pad;
  return simd16::Load(lanes);
}

// Query heads [first_head, first_head + kHeads) of one KV group over its K and V rows, read once
// for all of them. kDim: head_dim known when compiled (64, 128: loops unrolled), or 0 for any other
// (kv.head_dim). Each head's arithmetic is the same whatever kHeads is (its own sums, in the same
// order), so how a caller groups heads never changes a result. scores: kHeads × length. Element:
// the cache's (float or bf16 bits); the arithmetic is f32 either way.
template <int kDim, int kHeads, typename Element>
TPSERVE_SIMD16_INLINE void AttendHeadsBody(const float* q, int first_head, int heads,
                                           const KvLayerView& kv, const int32_t* block_table,
                                           int length, float scale, float* out, float* scores) {
  const int d = kDim > 0 ? kDim : kv.head_dim;
  const int kv_head = first_head / (heads / kv.kv_heads);
  const float* qh = q + first_head * d;  // [kHeads, d]
  RowPrefetcher<Element> prefetch(kv, kv_head, block_table, length);
  // Scores, sixteen positions a time: their lanes summed together (SumLanesOf16), the running
  // maximum per lane (max is exact, so its order does not matter).
  HeadRows<Element> keys(kv.keys, kv, kv_head, block_table);
  Float16 max_lanes[kHeads];
  for (int g = 0; g < kHeads; ++g) max_lanes[g] = Float16{} - INFINITY;
  for (int p0 = 0; p0 < length; p0 += 16) {
    const int n = std::min(16, length - p0);
    Float16 lanes[kHeads][16];
    for (int i = 0; i < n; ++i) {
      const Element* k = keys.Next();
      for (int g = 0; g < kHeads; ++g) lanes[g][i] = DotLanes(qh + g * d, k, d);
      prefetch.Step();
    }
    for (int g = 0; g < kHeads; ++g) {
      for (int i = n; i < 16; ++i) lanes[g][i] = Float16{};
      const Float16 s = SumLanesOf16(lanes[g]) * scale;
      float stored[16];
      simd16::Store(stored, s);
      std::copy_n(stored, n, scores + g * length + p0);
      const Float16 real = LoadPadded(stored, n, -INFINITY);  // a partial group's empty lanes hold 0
      max_lanes[g] = real > max_lanes[g] ? real : max_lanes[g];
    }
  }
  for (int g = 0; g < kHeads; ++g) {
    float* weights = scores + g * length;
    float max_score = -INFINITY;
    for (int i = 0; i < 16; ++i) max_score = std::max(max_score, max_lanes[g][i]);
    ExpShiftedBody(weights, length, max_score);
    // Σ exp in float64, 16 lanes a step into two 8-lane sums, then the lanes in a fixed order.
    using Double8 = double __attribute__((vector_size(64)));
    Double8 low = {}, high = {};
    for (int p0 = 0; p0 < length; p0 += 16) {
      const Float16 e = LoadPadded(weights + p0, length - p0, 0.0f);
      low += __builtin_convertvector(__builtin_shufflevector(e, e, 0, 1, 2, 3, 4, 5, 6, 7), Double8);
      high += __builtin_convertvector(__builtin_shufflevector(e, e, 8, 9, 10, 11, 12, 13, 14, 15), Double8);
    }
    const Double8 both = low + high;
    const double sum = ((both[0] + both[4]) + (both[2] + both[6])) + ((both[1] + both[5]) + (both[3] + both[7]));
    const float inv_sum = static_cast<float>(1.0 / sum);
    for (int p = 0; p < length; ++p) weights[p] *= inv_sum;  // the softmax weights
  }
  // out = Σ_p weight_p · v_p, 64 output elements a pass (four 16-lane sums per head in registers)
  // over every position: each element's sum runs over the positions in order, and the heads' and
  // vectors' chains side by side hide the adds' latency.
  float* oh = out + first_head * d;  // [kHeads, d]
  constexpr int kVectors = 4;
  for (int i0 = 0; i0 < d; i0 += 16 * kVectors) {
    const bool first_pass = i0 == 0;  // later passes find the rows in cache
    const int width = std::min(16 * kVectors, d - i0);
    HeadRows<Element> values(kv.values, kv, kv_head, block_table);
    if (width % 16 == 0) {
      const int vectors = width / 16;
      Float16 acc[kHeads][kVectors] = {};
      for (int p = 0; p < length; ++p) {
        const Element* v = values.Next();
        for (int j = 0; j < kVectors; ++j) {
          if (j >= vectors) break;
          const Float16 vj = LoadKv(v + i0 + 16 * j);
          for (int g = 0; g < kHeads; ++g) acc[g][j] += scores[g * length + p] * vj;
        }
        if (first_pass) prefetch.Step();
      }
      for (int g = 0; g < kHeads; ++g) {
        for (int j = 0; j < vectors; ++j) simd16::Store(oh + g * d + i0 + 16 * j, acc[g][j]);
      }
    } else {
      float acc[kHeads][16 * kVectors] = {};
      for (int p = 0; p < length; ++p) {
        const Element* v = values.Next();
        for (int g = 0; g < kHeads; ++g) {
          for (int j = 0; j < width; ++j)
            acc[g][j] += scores[g * length + p] * KvElement(v[i0 + j]);
        }
        if (first_pass) prefetch.Step();
      }
      for (int g = 0; g < kHeads; ++g) std::copy_n(acc[g], width, oh + g * d + i0);
    }
  }
}

template <int kDim, typename Element>
TPSERVE_SIMD16_INLINE void AttendHeadsOfDim(const float* q, int first_head, int count, int heads,
                                            const KvLayerView& kv, const int32_t* block_table,
                                            int length, float scale, float* out, float* scores) {
  for (int done = 0; done < count;) {  // kMaxHeadsPerPass at a time
    const int h = first_head + done;
    switch (std::min(count - done, kMaxHeadsPerPass)) {
      case 1:
        AttendHeadsBody<kDim, 1, Element>(q, h, heads, kv, block_table, length, scale, out, scores);
        done += 1;
        break;
      case 2:
        AttendHeadsBody<kDim, 2, Element>(q, h, heads, kv, block_table, length, scale, out, scores);
        done += 2;
        break;
      case 3:
        AttendHeadsBody<kDim, 3, Element>(q, h, heads, kv, block_table, length, scale, out, scores);
        done += 3;
        break;
      default:
        AttendHeadsBody<kDim, 4, Element>(q, h, heads, kv, block_table, length, scale, out, scores);
        done += 4;
        break;
    }
  }
}

// The body for this head_dim: unrolled for the common ones (AVX-512).
template <typename Element>
TPSERVE_SIMD16_INLINE void AttendHeadsAnyDim(const float* q, int first_head, int count, int heads,
                                             const KvLayerView& kv, const int32_t* block_table,
                                             int length, float scale, float* out, float* scores) {
  switch (kv.head_dim) {
    case 64:
      return AttendHeadsOfDim<64, Element>(q, first_head, count, heads, kv, block_table, length,
                                           scale, out, scores);
    case 128:
      return AttendHeadsOfDim<128, Element>(q, first_head, count, heads, kv, block_table, length,
                                            scale, out, scores);
    default:
      return AttendHeadsOfDim<0, Element>(q, first_head, count, heads, kv, block_table, length,
                                          scale, out, scores);
  }
}

// Without AVX-512 every head_dim takes the general body: the unrolled ones, split into SSE
// operations, took 15 s of this file's compile (25 s in all at -O3, 30 s under ASan) for a CPU
// that AVX-512's unrolled bodies already cover.
void AttendHeadsPortable(const float* q, int first_head, int count, int heads, const KvLayerView& kv,
                         const int32_t* block_table, int length, float scale, float* out, float* scores) {
  if (kv.dtype == KvDtype::kBf16) {
    return AttendHeadsOfDim<0, uint16_t>(q, first_head, count, heads, kv, block_table, length,
                                         scale, out, scores);
  }
  AttendHeadsOfDim<0, float>(q, first_head, count, heads, kv, block_table, length, scale, out,
                             scores);
}
#if defined(__x86_64__)
__attribute__((target("avx512f"))) void AttendHeadsAvx512(const float* q, int first_head, int count, int heads,
                                                          const KvLayerView& kv, const int32_t* block_table,
                                                          int length, float scale, float* out, float* scores) {
  if (kv.dtype == KvDtype::kBf16) {
    return AttendHeadsAnyDim<uint16_t>(q, first_head, count, heads, kv, block_table, length, scale,
                                       out, scores);
  }
  AttendHeadsAnyDim<float>(q, first_head, count, heads, kv, block_table, length, scale, out,
                           scores);
}
#endif

}  // namespace

void AttendHeads(const float* q, int first_head, int count, int heads, const KvLayerView& kv,
                 const int32_t* block_table, int length, float scale, float* out, float* scores) {
#if defined(__x86_64__)
  if (HasAvx512F()) return AttendHeadsAvx512(q, first_head, count, heads, kv, block_table, length, scale, out, scores);
#endif
  AttendHeadsPortable(q, first_head, count, heads, kv, block_table, length, scale, out, scores);
}

const char* KvDtypeName(KvDtype dtype) {
  return dtype == KvDtype::kBf16 ? "bf16" : "f32";
}
Result<KvDtype> ParseKvDtype(std::string_view name) {
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBf16}) {
    if (name == KvDtypeName(dtype)) return dtype;
  }
  return InvalidArgument("unknown KV cache dtype '" + std::string(name) +
                         "' (expected f32 or bf16)");
}
size_t KvDtypeBytes(KvDtype dtype) {
  return dtype == KvDtype::kBf16 ? sizeof(uint16_t) : sizeof(float);
}

void AttendOneToken(const float* q, int heads, const KvLayerView& kv, const int32_t* block_table,
                    int length, float scale, float* out, float* scores) {
  const int group = heads / kv.kv_heads;
  for (int first = 0; first < heads; first += group) {
    AttendHeads(q, first, group, heads, kv, block_table, length, scale, out, scores);
  }
}

}  // namespace tpserve::cpu
