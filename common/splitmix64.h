// SplitMix64 (Steele, Lea, Flood 2014) as a counter-based generator: output `index` of the stream
// that starts at `state` needs no earlier outputs. The random weights (one stream per tensor) and
// the sampler (one stream per sequence, one output per draw) use it, so any slice of a tensor and
// any draw of a sequence can be made on its own, on any rank or backend.
#pragma once

#include <cstdint>

namespace tpserve {

inline uint64_t SplitMix64At(uint64_t state, uint64_t index) {
  uint64_t z = state + (index + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace tpserve
