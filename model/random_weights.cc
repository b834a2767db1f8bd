#include "model/random_weights.h"

#include <cmath>
#include <string>

#include "common/dtype.h"
#include "common/splitmix64.h"

namespace tpserve {
namespace {

// [-1, 1) from the top 24 bits.
float Symmetric(uint64_t bits) { return static_cast<float>((bits >> 40) * 0x1.0p-23) - 1.0f; }

uint64_t HashName(const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

struct InitScale {
  float stddev = 0.0f;
  float mean = 0.0f;
};

// Standard deviation of each weight's random values. Projections reading a normalized
// activation use 1/sqrt(fan_in) so outputs stay O(1); the two projections that write into the
// residual stream are further scaled by 1/sqrt(2 * layers) (GPT-2's scheme) so the stream stays
// bounded through all layers; the LM head is scaled so logits have a standard deviation of ~4,
// spread wide enough that greedy choices are not near-ties.
InitScale ScaleFor(const WeightSpec& spec, const ModelConfig& c) {
  auto ends_with = [&](const char* suffix) {
    const std::string s = suffix;
    return spec.name.size() >= s.size() && spec.name.compare(spec.name.size() - s.size(), s.size(), s) == 0;
  };
  const float residual = 1.0f / std::sqrt(2.0f * static_cast<float>(c.num_layers));
  const float fan_in = static_cast<float>(spec.shape.size() == 2 ? spec.shape[1] : 1);
  if (ends_with("norm.weight")) return {0.05f, 1.0f};
  if (ends_with(".bias")) return {0.05f, 0.0f};
  if (spec.name == "model.embed_tokens.weight") {
    return {c.tie_word_embeddings ? 4.0f / std::sqrt(static_cast<float>(c.hidden_size)) : 1.0f, 0.0f};
  }
  if (spec.name == "lm_head.weight") return {4.0f / std::sqrt(fan_in), 0.0f};
  if (ends_with("o_proj.weight") || ends_with("down_proj.weight")) {
    return {residual / std::sqrt(fan_in), 0.0f};
  }
  return {1.0f / std::sqrt(fan_in), 0.0f};
}

}  // namespace

void RandomWeights::FillBf16(const WeightSpec& spec, size_t first, std::span<uint16_t> out) const {
  const InitScale scale = ScaleFor(spec, config_);
  const float half_width = scale.stddev * std::sqrt(3.0f);  // uniform with that stddev
  const uint64_t stream = seed_ ^ HashName(spec.name);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = F32ToBF16(scale.mean + half_width * Symmetric(SplitMix64At(stream, first + i)));
  }
}

}  // namespace tpserve
