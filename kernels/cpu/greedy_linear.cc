#include "kernels/cpu/greedy_linear.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>

#include "common/cache_line_allocator.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/linear_dot.h"
#include "kernels/cpu/thread_pool.h"

namespace tpserve::cpu {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr double kSmallestNormal = 0x1p-126;
// Rows screened per kernel call: each token's 256 screened outputs stay in L1 for the scan.
constexpr size_t kScreenRows = 256;

// `v` rounded up to the next float at or above it.
float RoundUp(double v) {
  const float f = static_cast<float>(v);
  return static_cast<double>(f) >= v ? f : std::nextafter(f, kInf);
}

// Token t's banned ids, ascending (empty without bans).
struct Bans {
  const int32_t* begin = nullptr;
  const int32_t* end = nullptr;
};
Bans BansOf(const GreedyLinearArgs& a, int t) {
  if (a.banned_offsets == nullptr) return {};
  return {a.banned_ids + a.banned_offsets[t], a.banned_ids + a.banned_offsets[t + 1]};
}
bool IsBanned(const Bans& bans, int64_t id) {
  return std::binary_search(bans.begin, bans.end, id);
}

// Without a screen: Linear's outputs, then the first largest finite output not banned.
void GreedyByScan(const GreedyLinearArgs& a, ThreadPool* pool, LinearKernel kernel, int32_t* ids,
                  GreedyLinearStats* stats) {
  thread_local std::vector<float, CacheLineAllocator<float>> y;
  y.resize(static_cast<size_t>(a.tokens) * a.out);
  Linear({.x = a.x,
          .w = a.w,
          .y = y.data(),
          .tokens = a.tokens,
          .in = a.in,
          .out = a.out,
          .layout = a.layout},
         pool, kernel);
  for (int t = 0; t < a.tokens; ++t) {
    const float* row = y.data() + static_cast<size_t>(t) * a.out;
    const Bans bans = BansOf(a, t);
    int32_t best = -1;
    for (int o = 0; o < a.out; ++o) {
      if (std::isfinite(row[o]) && (best < 0 || row[o] > row[best]) && !IsBanned(bans, o)) best = o;
    }
    ids[t] = best;
    if (best < 0 && stats != nullptr) ++stats->unsettled_tokens;
  }
}

// One token's screen: output o's screened value y lies within
// bound(o) = norm(o) · per_norm + |y| · 2⁻²⁰ + absolute of its exact value.
struct TokenBound {
  float per_norm = 0;
  float absolute = 0;
  bool settled = true;  // false: the activations or the outputs' range rule the screen out
};

// A screened output that might be its token's largest.
struct Candidate {
  int32_t row;
  float upper;  // its screened value + bound
};

// What one thread's rows gave a token: the largest lower bound, and the outputs whose upper bound
// reached the largest lower bound seen before them.
struct TokenScreen {
  float largest_lower = -kInf;
  std::vector<Candidate> candidates;
};

#if defined(__x86_64__)
// 16 outputs' bounds: norm · per_norm + |y| · relative + absolute.
__attribute__((target("avx512f"))) inline __m512 Bound16(__m512 y, const float* norms,
                                                         __m512 per_norm, __m512 relative,
                                                         __m512 absolute) {
  return _mm512_fmadd_ps(_mm512_loadu_ps(norms), per_norm,
                         _mm512_fmadd_ps(_mm512_abs_ps(y), relative, absolute));
}

// Screened outputs y[0, n) of rows first_row + [0, n) (n % 16 == 0; banned rows NaN) against the
// token's bound, in two passes over the 16-float vectors (in L1): the rows' largest lower bound
// raises screen->largest_lower, then every row whose upper bound reaches it becomes a candidate.
// NaN rows take part in neither (a NaN compare is false; MAXPS returns its second operand on one).
__attribute__((target("avx512f"))) void ScanScreened(const float* y, const float* norms, size_t n,
                                                     size_t first_row, const TokenBound& bound,
                                                     TokenScreen* screen) {
  const __m512 per_norm = _mm512_set1_ps(bound.per_norm);
  const __m512 absolute = _mm512_set1_ps(bound.absolute);
  const __m512 relative = _mm512_set1_ps(0x1p-20f);
  __m512 lowers = _mm512_set1_ps(-kInf);
  for (size_t i = 0; i < n; i += 16) {
    const __m512 v = _mm512_loadu_ps(y + i);
    lowers = _mm512_max_ps(
        _mm512_sub_ps(v, Bound16(v, norms + first_row + i, per_norm, relative, absolute)), lowers);
  }
  screen->largest_lower = std::max(screen->largest_lower, _mm512_reduce_max_ps(lowers));
  const __m512 threshold = _mm512_set1_ps(screen->largest_lower);
  for (size_t i = 0; i < n; i += 16) {
    const __m512 v = _mm512_loadu_ps(y + i);
    const __m512 upper =
        _mm512_add_ps(v, Bound16(v, norms + first_row + i, per_norm, relative, absolute));
    __mmask16 reach = _mm512_cmp_ps_mask(upper, threshold, _CMP_GE_OQ);
    if (reach == 0) continue;
    float uppers[16];
    _mm512_storeu_ps(uppers, upper);
    for (; reach != 0; reach &= reach - 1) {
      const int lane = __builtin_ctz(reach);
      screen->candidates.push_back({static_cast<int32_t>(first_row + i + lane), uppers[lane]});
    }
  }
}
#else
void ScanScreened(const float*, const float*, size_t, size_t, const TokenBound&, TokenScreen*) {}
#endif

// Token t's bound from its split activations (the exact pass's own: dot::SplitToBf16Pairs), or
// not settled where they are not finite or an output could overflow.
TokenBound BoundOf(const uint16_t* pairs, int in, float largest_norm) {
  double hi2 = 0, lo2 = 0;
  for (int i = 0; i < in; i += 2) {
    const uint16_t* p = pairs + 2 * static_cast<size_t>(i);  // [hi pair, lo pair]
    for (int e = 0; e < 2; ++e) {
      uint32_t hi_bits = static_cast<uint32_t>(p[e]) << 16,
               lo_bits = static_cast<uint32_t>(p[2 + e]) << 16;
      float hi, lo;
      std::memcpy(&hi, &hi_bits, sizeof(hi));
      std::memcpy(&lo, &lo_bits, sizeof(lo));
      hi2 += static_cast<double>(hi) * hi;
      lo2 += static_cast<double>(lo) * lo;
    }
  }
  const double hi_norm = std::sqrt(hi2), lo_norm = std::sqrt(lo2);
  // Every partial sum is at most |W[o]|₁-weighted |x|: far below overflow, or not settled.
  if (!std::isfinite(hi_norm) || !std::isfinite(lo_norm) ||
      !(static_cast<double>(largest_norm) * (hi_norm + lo_norm) < 0x1p100)) {
    return {.settled = false};
  }
  const double u = 0x1p-24, k = in + 8;
  const double gamma = k * u / (1 - k * u);
  const double root_in = std::sqrt(static_cast<double>(in));
  // Flushed denormals: a bf16 input below 2⁻¹²⁶ read as 0 (either side of a product), and products
  // or sums below it flushed, in each of the three sums (exact hi, exact lo, screened hi).
  const double per_norm =
      lo_norm * (1 + 3 * gamma) + 3 * gamma * hi_norm + 3 * root_in * kSmallestNormal;
  const double absolute =
      3 * root_in * (hi_norm + lo_norm) * kSmallestNormal + 6 * in * kSmallestNormal;
  // A margin over the f32 arithmetic of the bound and of y ± bound (ScanScreened).
  constexpr double kMargin = 1 + 0x1p-16;
  return {.per_norm = RoundUp(per_norm * kMargin), .absolute = RoundUp(absolute * kMargin)};
}

}  // namespace

RowNorms RowNormBounds(const uint16_t* w, int out, int in, WeightLayout layout, ThreadPool* pool) {
  RowNorms norms;
  norms.bounds.resize(static_cast<size_t>(out));
  auto rows = [&](size_t begin, size_t end) {
    std::vector<float> row(static_cast<size_t>(in));
    for (size_t o = begin; o < end; ++o) {
      ReadWeightRow(w, out, in, layout, static_cast<int>(o), row.data());
      double sum = 0;
      for (float v : row) sum += static_cast<double>(v) * v;
      norms.bounds[o] = std::isfinite(sum) ? RoundUp(std::sqrt(sum) * (1 + 0x1p-40)) : kInf;
    }
  };
  if (pool != nullptr) {
    pool->ParallelFor(static_cast<size_t>(out), 1024, rows);
  } else {
    rows(0, static_cast<size_t>(out));
  }
  norms.largest = out > 0 ? *std::max_element(norms.bounds.begin(), norms.bounds.end()) : 0;
  return norms;
}

bool GreedyLinearScreens(LinearKernel kernel, WeightLayout layout) {
#if defined(__x86_64__)
  return kernel == LinearKernel::kAvx512Bf16 && layout == WeightLayout::kPairGroups &&
         HasAvx512Bf16();
#else
  (void)kernel;
  (void)layout;
  return false;
#endif
}

void GreedyLinear(const GreedyLinearArgs& a, ThreadPool* pool, LinearKernel kernel, int32_t* ids,
                  GreedyLinearStats* stats) {
  if (a.tokens <= 0) return;
  if (!GreedyLinearScreens(kernel, a.layout) || a.norms == nullptr ||
      a.norms->bounds.size() != static_cast<size_t>(a.out)) {  // no norms of this matrix: no screen
    GreedyByScan(a, pool, kernel, ids, stats);
    return;
  }
  const size_t grouped_rows =
      static_cast<size_t>(a.out) / dot::kPairGroupRows * dot::kPairGroupRows;
  const size_t stride = dot::PairRowStride(a.in);
  thread_local std::vector<uint16_t, CacheLineAllocator<uint16_t>> pairs;
  pairs.resize(static_cast<size_t>(a.tokens) * stride);
  dot::SplitToBf16Pairs(a.x, a.tokens, a.in, pairs.data());
  const uint16_t* split = pairs.data();  // this thread's: the pool's threads read it through this
  std::vector<TokenBound> bounds(static_cast<size_t>(a.tokens));
  for (int t = 0; t < a.tokens; ++t)
    bounds[t] = BoundOf(split + t * stride, a.in, a.norms->largest);

  // The screen over the whole groups, each thread's rows in kScreenRows blocks.
  std::vector<TokenScreen> screens(static_cast<size_t>(a.tokens));
  std::mutex merge;
  auto screen_rows = [&](int /*owner*/, size_t begin, size_t end) {
    thread_local std::vector<float, CacheLineAllocator<float>> y;
    y.resize(static_cast<size_t>(a.tokens) * kScreenRows);
    std::vector<TokenScreen> local(static_cast<size_t>(a.tokens));
    {
      std::lock_guard<std::mutex> lock(merge);  // the largest lower bounds found so far
      for (int t = 0; t < a.tokens; ++t) local[t].largest_lower = screens[t].largest_lower;
    }
    for (size_t row = begin; row < end; row += kScreenRows) {
      const size_t n = std::min(kScreenRows, end - row);
      dot::GroupRowsHiAvx512Bf16(a.w + row * a.in, a.in, split, a.tokens, 0, n, y.data(),
                                 kScreenRows);
      for (int t = 0; t < a.tokens; ++t) {
        if (!bounds[t].settled) continue;
        float* token_y = y.data() + static_cast<size_t>(t) * kScreenRows;
        const Bans bans = BansOf(a, t);
        for (const int32_t* id = std::lower_bound(bans.begin, bans.end, static_cast<int32_t>(row));
             id != bans.end && static_cast<size_t>(*id) < row + n; ++id) {
          token_y[*id - row] = std::numeric_limits<float>::quiet_NaN();
        }
        ScanScreened(token_y, a.norms->bounds.data(), n, row, bounds[t], &local[t]);
      }
    }
    std::lock_guard<std::mutex> lock(merge);
    for (int t = 0; t < a.tokens; ++t) {
      screens[t].largest_lower = std::max(screens[t].largest_lower, local[t].largest_lower);
      screens[t].candidates.insert(screens[t].candidates.end(), local[t].candidates.begin(),
                                   local[t].candidates.end());
    }
  };
  if (grouped_rows > 0) {
    if (pool != nullptr) {
      const size_t row_bytes = 2 * static_cast<size_t>(a.in);
      pool->ParallelForBalanced(grouped_rows, dot::kPairGroupRows,
                                (kBalancedChunkBytes + row_bytes - 1) / row_bytes, screen_rows);
    } else {
      screen_rows(0, 0, grouped_rows);
    }
  }

  // The rows past the last group (row-major) exactly, as Linear computes them.
  const size_t tail = static_cast<size_t>(a.out) - grouped_rows;
  std::vector<float> tail_y(static_cast<size_t>(a.tokens) * tail);
  if (tail > 0) {
    Linear({.x = a.x,
            .w = a.w + grouped_rows * a.in,
            .y = tail_y.data(),
            .tokens = a.tokens,
            .in = a.in,
            .out = static_cast<int>(tail),
            .layout = a.layout},
           nullptr, kernel);
  }

  // Each token: its candidates' groups through the exact pass, then the first largest of the
  // exact values (the candidates in row order, then the tail).
  float exact[dot::kPairGroupRows];
  for (int t = 0; t < a.tokens; ++t) {
    ids[t] = -1;
    const Bans bans = BansOf(a, t);
    const float* token_tail = tail_y.data() + static_cast<size_t>(t) * tail;
    TokenScreen& screen = screens[t];
    for (size_t r = 0; r < tail; ++r) {
      if (!IsBanned(bans, static_cast<int64_t>(grouped_rows + r)))
        screen.largest_lower = std::max(screen.largest_lower, token_tail[r]);
    }
    std::erase_if(screen.candidates,
                  [&](const Candidate& c) { return !(c.upper >= screen.largest_lower); });
    if (!bounds[t].settled ||
        screen.candidates.size() > static_cast<size_t>(kMaxGreedyCandidates)) {
      if (stats != nullptr) ++stats->unsettled_tokens;
      continue;
    }
    std::sort(screen.candidates.begin(), screen.candidates.end(),
              [](const Candidate& l, const Candidate& r) { return l.row < r.row; });
    int64_t best = -1;
    float best_value = -kInf;
    int64_t computed_group = -1;
    for (const Candidate& c : screen.candidates) {
      const int64_t group = c.row / dot::kPairGroupRows * dot::kPairGroupRows;
      if (group != computed_group) {
        dot::GroupRowsAvx512Bf16(a.w + group * a.in, a.in, split + t * stride, 1, 0,
                                 dot::kPairGroupRows, exact, dot::kPairGroupRows);
        computed_group = group;
      }
      const float v = exact[c.row - group];
      if (best < 0 || v > best_value) {
        best = c.row;
        best_value = v;
      }
    }
    for (size_t r = 0; r < tail; ++r) {
      const int64_t id = static_cast<int64_t>(grouped_rows + r);
      if (token_tail[r] > best_value && !IsBanned(bans, id)) {
        best = id;
        best_value = token_tail[r];
      }
    }
    if (stats != nullptr) stats->candidates += static_cast<int64_t>(screen.candidates.size());
    if (best >= 0 && std::isfinite(best_value)) {
      ids[t] = static_cast<int32_t>(best);
    } else if (stats != nullptr) {
      ++stats->unsettled_tokens;
    }
  }
}

}  // namespace tpserve::cpu
