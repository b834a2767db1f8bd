// The seeded random weights of `make-model` and `--load-format dummy`. Element i of a tensor is a
// function of (seed, tensor name, i) alone (SplitMix64 is a counter-based generator), so any
// rank's slice can be made on its own and is bitwise the slice make-model would have written.
#pragma once

#include <cstdint>
#include <span>

#include "model/model_config.h"
#include "model/weight_layout.h"

namespace tpserve {

class RandomWeights {
 public:
  RandomWeights(const ModelConfig& config, uint64_t seed) : config_(config), seed_(seed) {}

  // bf16 bits of elements [first, first + out.size()) of `spec`, in row-major order. Uniform with
  // a per-tensor mean and standard deviation (norms near 1, projections ~ 1 / sqrt(fan_in),
  // residual-branch outputs scaled down by sqrt(2 * layers)).
  void FillBf16(const WeightSpec& spec, size_t first, std::span<uint16_t> out) const;

 private:
  ModelConfig config_;
  uint64_t seed_;
};

}  // namespace tpserve
