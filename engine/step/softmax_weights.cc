#include "engine/step/softmax_weights.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/simd16.h"

namespace tpserve {
namespace {

using cpu::simd16::Float16;
using Double8 = double __attribute__((vector_size(64)));

// exp below this is under float's normal range (and simd16::Exp clamps there): weight 0.
constexpr float kMinExponent = -87.0f;

// The largest logit, NaN skipped (a NaN is never greater); -inf if none.
TPSERVE_SIMD16_INLINE float MaxBody(const float* logits, int n) {
  Float16 lanes = Float16{} - INFINITY;
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const Float16 v = cpu::simd16::Load(logits + i);
    lanes = v > lanes ? v : lanes;
  }
  float best = -INFINITY;
  for (; i < n; ++i) best = logits[i] > best ? logits[i] : best;
  for (int k = 0; k < 16; ++k) best = lanes[k] > best ? lanes[k] : best;
  return best;
}

// weight[i] = exp((logits[i] - max) * (1 / temperature)) where that exponent is at least
// kMinExponent (NaN and -inf are not), 0 elsewhere; block_sums[b]: Σ of block b's weights in
// float64, two 8-lane sums then the lanes in order.
TPSERVE_SIMD16_INLINE void WeightsBody(const float* logits, int n, float max, float temperature,
                                       float* weight, double* block_sums, float* block_max) {
  const float inverse_temperature = 1.0f / temperature;  // finite for temperature >= 1e-30
  for (int begin = 0, block = 0; begin < n; begin += SoftmaxWeights::kBlock, ++block) {
    const int end = std::min(n, begin + SoftmaxWeights::kBlock);
    Double8 low = {}, high = {};
    Float16 largest = {};
    for (int i = begin; i < end; i += 16) {
      const int lanes = std::min(16, end - i);
      Float16 row;
      if (lanes == 16) {
        row = cpu::simd16::Load(logits + i);
      } else {
        float in[16];
        std::fill(std::begin(in), std::end(in), -INFINITY);  // past the end: weight 0
        std::memcpy(in, logits + i, lanes * sizeof(float));
        row = cpu::simd16::Load(in);
      }
      const Float16 exponent = (row - max) * inverse_temperature;
      const Float16 w = exponent >= kMinExponent ? cpu::simd16::Exp(exponent) : Float16{};
      largest = w > largest ? w : largest;
      if (lanes == 16) {
        cpu::simd16::Store(weight + i, w);
      } else {
        float out[16];
        cpu::simd16::Store(out, w);
        std::memcpy(weight + i, out, lanes * sizeof(float));
      }
      low +=
          __builtin_convertvector(__builtin_shufflevector(w, w, 0, 1, 2, 3, 4, 5, 6, 7), Double8);
      high += __builtin_convertvector(__builtin_shufflevector(w, w, 8, 9, 10, 11, 12, 13, 14, 15),
                                      Double8);
    }
    const Double8 both = low + high;
    double sum = 0;
    for (int j = 0; j < 8; ++j) sum += both[j];
    block_sums[block] = sum;
    float block_largest = 0;
    for (int j = 0; j < 16; ++j) block_largest = std::max(block_largest, largest[j]);
    block_max[block] = block_largest;
  }
}

void ComputePortable(const float* logits, int n, float temperature, float* max, float* weight,
                     double* block_sums, float* block_max) {
  *max = MaxBody(logits, n);
  WeightsBody(logits, n, *max, temperature, weight, block_sums, block_max);
}
#if defined(__x86_64__)
__attribute__((target("avx512f"))) void ComputeAvx512(const float* logits, int n, float temperature,
                                                      float* max, float* weight, double* block_sums,
                                                      float* block_max) {
  *max = MaxBody(logits, n);
  WeightsBody(logits, n, *max, temperature, weight, block_sums, block_max);
}
__attribute__((target("avx2,fma"))) void ComputeAvx2(const float* logits, int n, float temperature,
                                                     float* max, float* weight, double* block_sums,
                                                     float* block_max) {
  *max = MaxBody(logits, n);
  WeightsBody(logits, n, *max, temperature, weight, block_sums, block_max);
}
#endif

// Orders (logit, id) as the sampler does, descending logit then ascending id, as one integer:
// the logit's bits mapped so that unsigned order is float order (negative floats flipped, positive
// ones above them; -0 as +0, which compare equal), inverted, above the id. Logits here are not NaN.
uint64_t DescendingLogitKey(float logit, size_t id) {
  uint32_t bits;
  const float value = logit == 0.0f ? 0.0f : logit;
  std::memcpy(&bits, &value, sizeof(bits));
  const uint32_t ascending = (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
  return (static_cast<uint64_t>(~ascending) << 32) | static_cast<uint64_t>(id);
}

// Sorts DescendingLogitKey keys that arrive in ascending id order. Many keys (a near-uniform row's
// nucleus is most of the vocabulary): a stable radix sort on the logit half alone, 11 bits a pass,
// a pass skipped where every key has the same digit; equal logits keep their ascending ids, so the
// order is std::sort's. (std::sort took 7-8 ms for 115k keys.) Few keys: std::sort.
void SortKeysInIdOrder(std::vector<uint64_t>* keys) {
  constexpr size_t kRadixFrom = 4096;
  constexpr int kDigitBits = 11, kDigits = 1 << kDigitBits;
  if (keys->size() < kRadixFrom) {
    std::sort(keys->begin(), keys->end());
    return;
  }
  thread_local std::vector<uint64_t> other;  // kept between rows: no page faults on a new buffer
  other.resize(keys->size());
  std::array<size_t, kDigits> starts;  // 16 KiB on the stack: no allocation per row
  for (int shift = 32; shift < 64; shift += kDigitBits) {
    std::fill(starts.begin(), starts.end(), 0);
    for (uint64_t key : *keys) ++starts[(key >> shift) & (kDigits - 1)];
    if (*std::max_element(starts.begin(), starts.end()) == keys->size())
      continue;  // one digit: in order
    size_t at = 0;
    for (size_t& start : starts) at += std::exchange(start, at);
    for (uint64_t key : *keys) other[starts[(key >> shift) & (kDigits - 1)]++] = key;
    keys->swap(other);
  }
}

}  // namespace

bool SimdPathAvailable(SimdPath path) {
  switch (path) {
    case SimdPath::kBest:
    case SimdPath::kPortable:
      return true;
    case SimdPath::kAvx2:
      return cpu::HasAvx2Fma();
    case SimdPath::kAvx512:
      return cpu::HasAvx512F();
  }
  return false;
}

void ComputeSoftmaxWeights(std::span<const float> logits, float temperature,
                           std::span<const int32_t> banned, SoftmaxWeights* out, SimdPath path) {
  const int vocab = static_cast<int>(logits.size());
  std::vector<float> masked;  // banned ids as NaN: no maximum, no weight
  const float* row = logits.data();
  if (!banned.empty()) {
    masked.assign(logits.begin(), logits.end());
    for (int32_t id : banned) {
      if (id >= 0 && id < vocab) masked[id] = std::nanf("");
    }
    row = masked.data();
  }
  out->weight.resize(vocab);
  out->block_sums.resize((vocab + SoftmaxWeights::kBlock - 1) / SoftmaxWeights::kBlock);
  auto compute = ComputePortable;
#if defined(__x86_64__)
  const bool best = path == SimdPath::kBest;
  if ((best || path == SimdPath::kAvx512) && cpu::HasAvx512F()) {
    compute = ComputeAvx512;
  } else if ((best || path == SimdPath::kAvx2) && cpu::HasAvx2Fma()) {
    compute = ComputeAvx2;
  }
#endif
  out->block_max.resize(out->block_sums.size());
  compute(row, vocab, temperature, &out->max_logit, out->weight.data(), out->block_sums.data(),
          out->block_max.data());
  out->total = 0;
  for (double sum : out->block_sums) out->total += sum;
}

std::vector<int32_t> LeadingIds(std::span<const float> logits, const SoftmaxWeights& weights,
                                size_t count, double mass) {
  const std::vector<float>& weight = weights.weight;
  const size_t vocab = weight.size();
  // Ids per bucket of weight: a float's top 14 bits (sign, exponent, 5 leading mantissa bits), 1/32
  // of an octave wide, which order nonnegative floats as their values do. Weights of 0 fall in
  // bucket 0; the others (normal floats: at least exp(-87)) in buckets 32 and up. Four counts side
  // by side (id % 4), so that runs of ids in one bucket do not wait on each other's increments.
  constexpr int kShift = 18, kBuckets = 1 << 13;
  auto bucket_of = [](float w) {
    uint32_t bits;
    std::memcpy(&bits, &w, sizeof(bits));
    return static_cast<size_t>(bits >> kShift);
  };
  auto bucket_floor = [](int bucket) {  // the smallest weight in `bucket`
    const uint32_t bits = static_cast<uint32_t>(bucket) << kShift;
    float w;
    std::memcpy(&w, &bits, sizeof(w));
    return w;
  };
  thread_local std::vector<uint32_t> per_copy;
  per_copy.assign(4 * kBuckets, 0);
  for (size_t id = 0; id < vocab; ++id) ++per_copy[(id % 4) * kBuckets + bucket_of(weight[id])];
  // From the top: the fewest buckets that hold `count` ids and, by a bound on what lies below them
  // (each id there at its bucket's top), `mass` of weight. Then one bucket more to spare.
  int first = 1;
  {
    double below = 0;  // Σ of the bound over the buckets under `bucket`, built from the bottom
    std::vector<double> below_of(kBuckets, 0.0);
    for (int bucket = 1; bucket < kBuckets; ++bucket) {
      below_of[bucket] = below;
      const size_t ids_in = per_copy[bucket] + per_copy[kBuckets + bucket] +
                            per_copy[2 * kBuckets + bucket] + per_copy[3 * kBuckets + bucket];
      below += static_cast<double>(ids_in) * bucket_floor(bucket + 1);
    }
    size_t have = 0;
    for (int bucket = kBuckets - 1; bucket >= 1; --bucket) {
      have += per_copy[bucket] + per_copy[kBuckets + bucket] + per_copy[2 * kBuckets + bucket] +
              per_copy[3 * kBuckets + bucket];
      if (have >= count && weights.total - below_of[bucket] >= mass) {
        first = bucket;
        break;
      }
    }
  }
  const int taken = std::max(1, first - 1);
  const float at_least = bucket_floor(taken);
  // Sorted as integers: a key per id that orders by descending logit, then ascending id.
  size_t taken_ids = 0;
  for (int bucket = taken; bucket < kBuckets; ++bucket) {
    for (int copy = 0; copy < 4; ++copy) taken_ids += per_copy[copy * kBuckets + bucket];
  }
  thread_local std::vector<uint64_t> keys;  // kept between rows: no page faults on a new buffer
  keys.clear();
  keys.reserve(taken_ids);
  for (size_t block = 0; block < weights.block_max.size(); ++block) {
    if (weights.block_max[block] < at_least) continue;  // (most blocks, where a few ids lead)
    const size_t end = std::min(vocab, (block + 1) * SoftmaxWeights::kBlock);
    for (size_t id = block * SoftmaxWeights::kBlock; id < end; ++id) {
      if (weight[id] >= at_least) keys.push_back(DescendingLogitKey(logits[id], id));
    }
  }
  if (mass <= 0 && count > 0 && keys.size() > 2 * count) {
    // A count alone (top-k, logprobs): only the first `count` are sorted.
    std::nth_element(keys.begin(), keys.begin() + count, keys.end());
    keys.resize(count);
    std::sort(keys.begin(), keys.end());
  } else {
    SortKeysInIdOrder(&keys);
  }
  std::vector<int32_t> ids(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) ids[i] = static_cast<int32_t>(keys[i] & 0xffffffffu);
  if (taken == 1) return ids;  // every id of nonzero weight, or the first `count` of them
  // Exp is monotonic only to within its rounding: an id left out just below the bound may have a
  // higher logit than one just above it. Kept: the ids before the first within rounding of the
  // bound, whose logits are above every id left out.
  const float clear_of = at_least * (1.0f + 1e-5f);
  size_t trusted = 0;
  double trusted_mass = 0;
  while (trusted < ids.size() && weight[ids[trusted]] >= clear_of)
    trusted_mass += weight[ids[trusted++]];
  if (trusted >= count && trusted_mass >= mass) {
    ids.resize(trusted);
    return ids;
  }
  // (The bound held; rounding did not.) `keys` is spent by now, so the call may reuse it.
  return LeadingIds(logits, weights, vocab + 1, INFINITY);
}

int32_t IdAtInIdOrder(const SoftmaxWeights& weights, double u) {
  const int vocab = static_cast<int>(weights.weight.size());
  auto last_weighted = [&](int begin, int end) {  // the last id of nonzero weight in [begin, end)
    for (int id = end - 1; id >= begin; --id) {
      if (weights.weight[id] > 0) return id;
    }
    return -1;
  };
  for (size_t block = 0; block < weights.block_sums.size(); ++block) {
    const int begin = static_cast<int>(block) * SoftmaxWeights::kBlock;
    const int end = std::min(vocab, begin + SoftmaxWeights::kBlock);
    if (!(u < weights.block_sums[block])) {
      u -= weights.block_sums[block];
      continue;
    }
    for (int id = begin; id < end; ++id) {
      if (u < weights.weight[id]) return id;
      u -= weights.weight[id];
    }
    return last_weighted(begin, end);  // the block's sum held u; its ids' rounding did not
  }
  return last_weighted(0, vocab);
}

}  // namespace tpserve
