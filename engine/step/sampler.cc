#include "engine/step/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "common/splitmix64.h"
#include "engine/step/softmax_weights.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/simd16.h"

namespace tpserve {

Status ValidateSamplingParams(const SamplingParams& params, const std::string& prefix) {
  if (!(params.temperature >= 0) || std::isinf(params.temperature)) {  // NaN fails the first test
    return InvalidArgument(prefix + "temperature: must be a finite number >= 0, got " +
                           std::to_string(params.temperature));
  }
  if (!(params.top_p > 0 && params.top_p <= 1)) {
    return InvalidArgument(prefix + "top_p: must be in (0, 1], got " + std::to_string(params.top_p));
  }
  if (params.top_k < 0) return InvalidArgument(prefix + "top_k: must be >= 0, got " + std::to_string(params.top_k));
  return Status::Ok();
}

std::vector<int32_t> BannedTokens(const SamplingParams& params, std::span<const int> eos_ids,
                                  int generated) {
  std::vector<int32_t> banned;
  if (generated >= params.min_tokens) return banned;
  banned = params.stop_token_ids;
  if (!params.ignore_eos) banned.insert(banned.end(), eos_ids.begin(), eos_ids.end());
  return banned;
}

bool IsStopToken(const SamplingParams& params, std::span<const int> eos_ids, int32_t id) {
  const auto& stops = params.stop_token_ids;
  return std::find(stops.begin(), stops.end(), id) != stops.end() ||
         (!params.ignore_eos && std::find(eos_ids.begin(), eos_ids.end(), id) != eos_ids.end());
}

namespace {

// `banned` is empty (nothing banned) or has one flag per vocabulary id.
bool IsBanned(const std::vector<bool>& banned, int id) { return !banned.empty() && banned[id]; }

// The largest logit of a row and the first id it is at: -1 if no logit is above -inf.
// The portable pass: the compiler vectorizes the maximum, then a scalar search for its position
// (half the vocabulary on average).
int32_t FirstLargestPortable(std::span<const float> logits) {
  const int vocab = static_cast<int>(logits.size());
  float lanes[16];
  std::fill(std::begin(lanes), std::end(lanes), -INFINITY);
  int i = 0;
  for (; i + 16 <= vocab; i += 16) {
    for (int k = 0; k < 16; ++k) lanes[k] = logits[i + k] > lanes[k] ? logits[i + k] : lanes[k];
  }
  float best_value = -INFINITY;
  for (; i < vocab; ++i) best_value = logits[i] > best_value ? logits[i] : best_value;
  for (float lane : lanes) best_value = lane > best_value ? lane : best_value;
  if (best_value == -INFINITY) return -1;
  int best = 0;
  while (logits[best] != best_value) ++best;
  return best;
}

// One pass on 16-float vectors (simd16.h): each lane keeps its largest logit and the first id it
// saw it at (a strict > keeps the first; NaN is never greater); then the lanes (the largest value,
// the lowest id among equals) and the last vocab % 16 ids where strictly greater. 6.5 us a 128k
// row with AVX-512 against 50-65 for the portable pass, whose position search is most of it (on a
// 2-vCPU AMD EPYC; 8 rows a step at batch 8). Without AVX2 the 64-byte vectors would be split
// into scalars: that CPU takes the portable pass.
TPSERVE_SIMD16_INLINE int32_t FirstLargestBody(std::span<const float> logits) {
  using cpu::simd16::Float16;
  using cpu::simd16::Int16;
  const int vocab = static_cast<int>(logits.size());
  const Int16 lane_offsets = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  Float16 lanes_max = Float16{} - INFINITY;
  Int16 lanes_id = Int16{} - 1;
  int i = 0;
  for (; i + 16 <= vocab; i += 16) {
    const Float16 v = cpu::simd16::Load(&logits[i]);
    const Int16 greater = v > lanes_max;
    lanes_max = greater ? v : lanes_max;
    lanes_id = greater ? lane_offsets + i : lanes_id;
  }
  float lane_max[16];
  int32_t lane_id[16];
  std::memcpy(lane_max, &lanes_max, sizeof(lane_max));
  std::memcpy(lane_id, &lanes_id, sizeof(lane_id));
  int best = -1;
  float best_value = -INFINITY;
  for (int k = 0; k < 16; ++k) {
    const bool better = lane_max[k] > best_value || (lane_max[k] == best_value && lane_id[k] < best);
    if (lane_id[k] >= 0 && (best < 0 || better)) {
      best = lane_id[k];
      best_value = lane_max[k];
    }
  }
  for (; i < vocab; ++i) {
    if (logits[i] > best_value) {
      best = i;
      best_value = logits[i];
    }
  }
  return best;
}

#if defined(__x86_64__)
__attribute__((target("avx512f"))) int32_t FirstLargestAvx512(std::span<const float> logits) {
  return FirstLargestBody(logits);
}
__attribute__((target("avx2"))) int32_t FirstLargestAvx2(std::span<const float> logits) {
  return FirstLargestBody(logits);
}
#endif

int32_t FirstLargest(std::span<const float> logits) {
#if defined(__x86_64__)
  if (cpu::HasAvx512F()) return FirstLargestAvx512(logits);
  if (cpu::HasAvx2Fma()) return FirstLargestAvx2(logits);
#endif
  return FirstLargestPortable(logits);
}

// The largest logit's id (lowest id on ties), skipping banned ids; NaN logits never win.
int32_t GreedyId(std::span<const float> logits, const std::vector<bool>& banned) {
  auto banned_id = [&](int id) { return IsBanned(banned, id); };
  const int vocab = static_cast<int>(logits.size());
  int best = FirstLargest(logits);
  if (best < 0) {  // nothing above -inf: the first -inf, if any
    best = 0;
    while (best < vocab && logits[best] != -INFINITY) ++best;
  }
  if (best == vocab || banned_id(best)) {  // all NaN, or the winner is banned
    best = -1;
    for (int id = 0; id < vocab; ++id) {
      if (!banned_id(id) && (best < 0 || logits[id] > logits[best])) best = id;
    }
  }
  return best;
}

// One draw from softmax(logits / temperature) restricted by top-k and top-p, at `uniform` in
// [0, 1). Without top-k and top-p the ids are weighed in id order; with them, in descending logit
// order (ties: lower id first), cut to the top k, then to the smallest prefix whose probability
// reaches top_p. Only that prefix is ever sorted (LeadingIds). `banned` ids weigh 0.
int32_t Draw(std::span<const float> logits, const SamplingParams& params,
             std::span<const int32_t> banned, const std::vector<bool>& is_banned, double uniform) {
  thread_local SoftmaxWeights weights;  // each sampling thread's own, reused row to row
  ComputeSoftmaxWeights(logits, params.temperature, banned, &weights);
  if (!std::isfinite(weights.max_logit)) return GreedyId(logits, is_banned);  // nothing to weigh
  const bool top_p = params.top_p < 1.0f;
  if (params.top_k == 0 && !top_p) return IdAtInIdOrder(weights, uniform * weights.total);
  const std::vector<float>& w = weights.weight;
  std::vector<int32_t> order;
  double total = weights.total;
  if (params.top_k > 0) {
    order = LeadingIds(logits, weights, static_cast<size_t>(params.top_k), 0);
    if (order.size() > static_cast<size_t>(params.top_k)) order.resize(params.top_k);
    total = 0;
    for (int32_t id : order) total += w[id];
  } else {
    order = LeadingIds(logits, weights, 1, params.top_p * weights.total);
  }
  size_t keep = order.size();
  if (top_p) {
    // The smallest prefix whose mass reaches top_p; where rounding left LeadingIds' prefix short of
    // it, the search goes on over every id.
    auto nucleus = [&]() -> size_t {
      double cumulative = 0;
      for (size_t i = 0; i < order.size(); ++i) {
        cumulative += w[order[i]] / total;
        if (cumulative >= params.top_p) return i + 1;
      }
      return 0;
    };
    keep = nucleus();
    if (keep == 0 && params.top_k == 0) {
      order = LeadingIds(logits, weights, logits.size(), INFINITY);
      keep = nucleus();
    }
    if (keep == 0) keep = order.size();
  }
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += w[order[i]];
  double u = uniform * kept;
  for (size_t i = 0; i < keep; ++i) {
    if (u < w[order[i]]) return order[i];
    u -= w[order[i]];
  }
  return order[keep - 1];  // rounding carried u past the end: every id here has weight
}

}  // namespace

int32_t FirstLargestLogit(std::span<const float> logits, SimdPath path) {
#if defined(__x86_64__)
  if (path == SimdPath::kAvx512 && cpu::HasAvx512F()) return FirstLargestAvx512(logits);
  if (path == SimdPath::kAvx2 && cpu::HasAvx2Fma()) return FirstLargestAvx2(logits);
#endif
  return path == SimdPath::kBest ? FirstLargest(logits) : FirstLargestPortable(logits);
}

SampledToken SampleToken(std::span<const float> logits, const SamplingParams& params,
                         std::span<const int32_t> banned, uint64_t draw) {
  const int vocab = static_cast<int>(logits.size());
  std::vector<bool> is_banned;  // empty unless something is banned (the common case)
  if (!banned.empty()) {
    is_banned.assign(vocab, false);
    int count = 0;
    for (int32_t id : banned) {
      if (id >= 0 && id < vocab && !is_banned[id]) {
        is_banned[id] = true;
        ++count;
      }
    }
    if (count == vocab) is_banned.clear();  // nothing left to choose from: ignore the bans
  }
  SampledToken result;
  const bool greedy = !(params.temperature >= kGreedyTemperature);  // NaN too
  // [0, 1) from the top 53 bits of the sequence's output number `draw`.
  const double uniform = static_cast<double>(SplitMix64At(params.seed, draw) >> 11) * 0x1.0p-53;
  result.id = greedy ? GreedyId(logits, is_banned)
                     : Draw(logits, params, is_banned.empty() ? std::span<const int32_t>{} : banned,
                            is_banned, uniform);
  if (params.logprobs <= 0)
    return result;  // a log-softmax of the row: 0.15 ms at 128k ids, on request
  // log-softmax of the raw logits: log p = logit - (max + log Σ exp(logit - max)).
  thread_local SoftmaxWeights raw;
  ComputeSoftmaxWeights(logits, 1.0f, {}, &raw);
  const double log_z = std::isfinite(raw.max_logit) ? raw.max_logit + std::log(raw.total) : NAN;
  auto logprob = [&](int id) { return static_cast<float>(logits[id] - log_z); };
  result.logprob = logprob(result.id);
  const size_t n = std::min<size_t>(params.logprobs, vocab);
  std::vector<int32_t> ids = LeadingIds(logits, raw, n, 0);
  if (ids.size() < n) {  // fewer ids of nonzero probability than asked for: all of them, in order
    ids.resize(vocab);
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [&](int32_t a, int32_t b) {
      return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
    });
  }
  for (size_t i = 0; i < n; ++i) result.top.push_back({ids[i], logprob(ids[i])});
  return result;
}

}  // namespace tpserve
