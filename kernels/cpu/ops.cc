#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace tpserve::cpu {

void RmsNorm(const float* x, const float* weight, float* y, int n, float eps) {
  double sum_sq = 0;
  for (int i = 0; i < n; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(sum_sq / n + eps));
  for (int i = 0; i < n; ++i) y[i] = x[i] * scale * weight[i];
}

void SiluMul(const float* gate, const float* up, float* out, int n) {
  for (int i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
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
        const double smooth = (old_context / wavelen - p.low_freq_factor) /
                              (p.high_freq_factor - p.low_freq_factor);
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

void AttendOneToken(const float* q, int heads, const KvLayerView& kv, const int32_t* block_table,
                    int length, float scale, float* out, float* scores) {
  const int group = heads / kv.kv_heads;
  const int d = kv.head_dim;
  auto row = [&](const float* base, int position, int kv_head) {
    const int block = block_table[position / kv.block_size];
    const size_t slot = static_cast<size_t>(block) * kv.block_size + position % kv.block_size;
    return base + (slot * kv.kv_heads + kv_head) * d;
  };
  for (int h = 0; h < heads; ++h) {
    const float* qh = q + h * d;
    const int kv_head = h / group;
    float max_score = -INFINITY;
    for (int p = 0; p < length; ++p) {
      const float* k = row(kv.keys, p, kv_head);
      float dot = 0;
      for (int i = 0; i < d; ++i) dot += qh[i] * k[i];
      scores[p] = dot * scale;
      max_score = std::max(max_score, scores[p]);
    }
    double sum = 0;
    for (int p = 0; p < length; ++p) {
      scores[p] = std::exp(scores[p] - max_score);
      sum += scores[p];
    }
    const float inv_sum = static_cast<float>(1.0 / sum);
    float* oh = out + h * d;
    std::fill(oh, oh + d, 0.0f);
    for (int p = 0; p < length; ++p) {
      const float* v = row(kv.values, p, kv_head);
      const float weight = scores[p] * inv_sum;
      for (int i = 0; i < d; ++i) oh[i] += weight * v[i];
    }
  }
}

}  // namespace tpserve::cpu
