#include "kernels/cpu/linear.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/cache_line_allocator.h"
#include "common/dtype.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/linear_amx.h"
#include "kernels/cpu/linear_dot.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/x86_intrinsics.h"

namespace tpserve::cpu {
namespace {

using dot::kTokenTile;

#if defined(__x86_64__)
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512 LoadBf16x16(const uint16_t* p) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}

// Dot products of `rows` consecutive bf16 weight rows with `n` (1..4) activation rows each. 16-element
// block b of a row accumulates into accumulator b % 4 of its token (four independent chains hide the
// FMA latency and keep four loads in flight); the accumulators are combined as (a0 + a1) + (a2 + a3)
// and reduced the same way for every token, so a token's result does not depend on n.
template <int n>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void DotRowsAvx512(const uint16_t* w, size_t rows,
                                                                     const float* const* x, int in,
                                                                     float* out, size_t out_stride,
                                                                     StreamPrefetch prefetch) {
  for (size_t r = 0; r < rows; ++r, w += in) {
    __m512 acc[n][4];
    for (int t = 0; t < n; ++t) {
      for (int k = 0; k < 4; ++k) acc[t][k] = _mm512_setzero_ps();
    }
    int i = 0;
    for (; i + 64 <= in; i += 64) {
      // The hardware streamer stops at 4 KiB boundaries: the weights are prefetched a few KiB
      // ahead (stream_prefetch.h), past this row into the next ones, which are contiguous.
      PrefetchAhead(w + i, 128, prefetch);
      const __m512 w0 = LoadBf16x16(w + i), w1 = LoadBf16x16(w + i + 16);
      const __m512 w2 = LoadBf16x16(w + i + 32), w3 = LoadBf16x16(w + i + 48);
      for (int t = 0; t < n; ++t) {
        acc[t][0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x[t] + i), acc[t][0]);
        acc[t][1] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x[t] + i + 16), acc[t][1]);
        acc[t][2] = _mm512_fmadd_ps(w2, _mm512_loadu_ps(x[t] + i + 32), acc[t][2]);
        acc[t][3] = _mm512_fmadd_ps(w3, _mm512_loadu_ps(x[t] + i + 48), acc[t][3]);
      }
    }
    // Tail blocks (at most 4) continue the b % 4 assignment; unrolled, so that k is a constant and
    // the accumulators stay in registers (indexed at run time they live on the stack).
#pragma GCC unroll 4
    for (int k = 0; k < 4 && i < in; ++k, i += 16) {
      const int remaining = std::min(16, in - i);
      const __mmask16 mask = static_cast<__mmask16>((1u << remaining) - 1);
      const __m512 wk = _mm512_castsi512_ps(_mm512_slli_epi32(
          _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, w + i)), 16));
      for (int t = 0; t < n; ++t) {
        acc[t][k] = _mm512_fmadd_ps(wk, _mm512_maskz_loadu_ps(mask, x[t] + i), acc[t][k]);
      }
    }
    for (int t = 0; t < n; ++t) {
      const __m512 sum = _mm512_add_ps(_mm512_add_ps(acc[t][0], acc[t][1]),
                                       _mm512_add_ps(acc[t][2], acc[t][3]));
      out[t * out_stride + r] = _mm512_reduce_add_ps(sum);
    }
  }
}
#endif

// Portable kernel: 32 lanes of fused multiply-adds, reduced pairwise in a fixed order.
template <int n>
void DotRowsPortable(const uint16_t* w, size_t rows, const float* const* x, int in, float* out,
                     size_t out_stride, StreamPrefetch /*prefetch: none here*/) {
  for (size_t r = 0; r < rows; ++r, w += in) {
    for (int t = 0; t < n; ++t) {
      float lanes[32] = {};
      for (int i = 0; i < in; ++i) {
        uint32_t bits = static_cast<uint32_t>(w[i]) << 16;
        float wf;
        std::memcpy(&wf, &bits, 4);
        lanes[i % 32] = std::fma(wf, x[t][i], lanes[i % 32]);
      }
      for (int width = 16; width >= 1; width /= 2) {
        for (int k = 0; k < width; ++k) lanes[k] += lanes[k + width];
      }
      out[t * out_stride + r] = lanes[0];
    }
  }
}

using DotTable = dot::Table<dot::F32Fn>;


const DotTable& Table(bool avx512) {
#if defined(__x86_64__)
  static const DotTable kAvx512 = {
      {nullptr, DotRowsAvx512<1>, DotRowsAvx512<2>, DotRowsAvx512<3>, DotRowsAvx512<4>}};
  if (avx512) return kAvx512;
#endif
  static const DotTable kPortable = {
      {nullptr, DotRowsPortable<1>, DotRowsPortable<2>, DotRowsPortable<3>, DotRowsPortable<4>}};
  return kPortable;
}

// y[t, r] += bias[r] for every token and rows [row_begin, row_end).
void AddBias(const LinearArgs& a, size_t row_begin, size_t row_end) {
  if (a.bias == nullptr) return;
  for (int t = 0; t < a.tokens; ++t) {
    float* y = a.y + static_cast<size_t>(t) * a.YStride();
    for (size_t r = row_begin; r < row_end; ++r) y[r] += a.bias[r];
  }
}

// Output rows [row_begin, row_end) in blocks: a block of weight rows stays in cache while every
// token tile passes over it, so a batch streams the weights from memory once. One token tile
// (decode's batch 1 to 4) takes the table's rows_per_call at a time.
// `activations`: a.x, or the same rows as the kernel's table takes them (row_stride apart).
template <typename Act, typename Fn>
void DotRows(const LinearArgs& a, const Act* activations, size_t row_stride, const dot::Table<Fn>& table,
             size_t row_begin, size_t row_end) {
  const size_t row_block = a.tokens <= kTokenTile ? std::min(table.rows_per_call, row_end - row_begin) : 32;
  // One token streams the rows as fast as memory gives them (the table's one_token_prefetch); more
  // tokens (or, with AVX2, several sweeps over a row) leave the hardware prefetcher no stream to
  // follow (stream_prefetch.h).
  const StreamPrefetch prefetch =
      a.tokens == 1 ? table.one_token_prefetch : StreamPrefetch::kEveryLine;
  for (size_t block = row_begin; block < row_end; block += row_block) {
    const size_t rows = std::min(row_end, block + row_block) - block;
    for (int t0 = 0; t0 < a.tokens; t0 += kTokenTile) {
      const int n = std::min(kTokenTile, a.tokens - t0);
      const Act* x[kTokenTile];
      for (int t = 0; t < n; ++t) x[t] = activations + static_cast<size_t>(t0 + t) * row_stride;
      float* y = a.y + static_cast<size_t>(t0) * a.YStride() + block;
      table.fn[n](a.w + block * a.in, rows, x, a.in, y, a.YStride(), prefetch);
    }
    AddBias(a, block, block + rows);
  }
}

// Rows per full unit of a tiled layout: an AMX block of 16, a pair group of 32.
size_t TiledUnitRows(WeightLayout layout) {
  return layout == WeightLayout::kPairGroups ? dot::kPairGroupRows : amx::kTileRows;
}

// Rows [0, RowsInFullUnits(out, layout)) of a tiled matrix are arranged; the rest are row-major.
size_t RowsInFullUnits(int out, WeightLayout layout) {
  if (layout == WeightLayout::kRowMajor) return 0;
  const size_t unit = TiledUnitRows(layout);
  return static_cast<size_t>(out) / unit * unit;
}

// The activations as the kernel reads them: AMX's packed tiles, AVX-512 BF16's bf16 hi and lo parts
// (as pairs for the group path, as halves for the row path), or the f32 rows on whole cache lines.
// Each thread that computes rows of a call makes its own, in its own thread_local scratch: read
// from the caller's scratch instead, a decode step's Linears at 8 tokens ran 5-8% slower (the
// other core's lines, rewritten every call; docs/PERFORMANCE.md, session 32).
struct PreparedActivations {
  const float* x = nullptr;  // f32 rows, x_stride apart (the f32 kernels)
  size_t x_stride = 0;
  const amx::PackedActivations* packed = nullptr;
  const uint16_t* pairs = nullptr;   // SplitToBf16Pairs's rows, PairRowStride(in) apart
  const uint16_t* halves = nullptr;  // SplitToBf16's rows, 2 * in apart
};

PreparedActivations PrepareActivations(const LinearArgs& a, LinearKernel kernel) {
  PreparedActivations p{.x = a.x, .x_stride = static_cast<size_t>(a.in)};
  if (kernel == LinearKernel::kAmx && a.layout == WeightLayout::kAmxTiles) {
    thread_local amx::PackedActivations packed;
    amx::Pack(a.x, a.tokens, a.in, &packed);
    p.packed = &packed;
    return p;
  }
  if (kernel == LinearKernel::kAvx512Bf16) {
    const size_t grouped_rows = RowsInFullUnits(a.out, a.layout);
    thread_local std::vector<uint16_t, CacheLineAllocator<uint16_t>> pairs, halves;
    if (grouped_rows > 0) {
      pairs.resize(static_cast<size_t>(a.tokens) * dot::PairRowStride(a.in));
      dot::SplitToBf16Pairs(a.x, a.tokens, a.in, pairs.data());
      p.pairs = pairs.data();
    }
    if (grouped_rows < static_cast<size_t>(a.out)) {
      halves.resize(static_cast<size_t>(a.tokens) * 2 * a.in);
      dot::SplitToBf16(a.x, a.tokens, a.in, halves.data());
      p.halves = halves.data();
    }
    return p;
  }
  if (kernel == LinearKernel::kAvx2) {
    thread_local std::vector<float, CacheLineAllocator<float>> permuted;
    p.x_stride = dot::Avx2RowStride(a.in);
    permuted.resize(static_cast<size_t>(a.tokens) * p.x_stride);
    dot::PermuteForAvx2(a.x, a.tokens, a.in, permuted.data());
    p.x = permuted.data();
    return p;
  }
  // Every token's row on whole cache lines: a 512-bit activation load that straddles two lines
  // issues twice, and the AVX-512 kernel then ran at 54 GB/s of weights per thread in cache against
  // 79 aligned (docs/PERFORMANCE.md). The engine's buffers are aligned already; any other input is
  // copied once, rows padded to 16 floats. (AVX2 reads its own permuted copy, aligned the same
  // way.)
  const size_t stride = (static_cast<size_t>(a.in) + 15) / 16 * 16;
  if (kernel != LinearKernel::kPortable &&
      (reinterpret_cast<uintptr_t>(a.x) % 64 != 0 ||
       (a.tokens > 1 && stride != static_cast<size_t>(a.in)))) {
    thread_local std::vector<float, CacheLineAllocator<float>> aligned;
    aligned.resize(static_cast<size_t>(a.tokens) * stride);
    for (int t = 0; t < a.tokens; ++t) {
      std::copy_n(a.x + static_cast<size_t>(t) * a.in, a.in, aligned.data() + t * stride);
    }
    p.x = aligned.data();
    p.x_stride = stride;
  }
  return p;
}

// All rows of `a` on this thread: a whole matrix, or a view of some of its rows (w, bias and y at
// its first row, which starts a unit of the layout; out its rows).
void ComputeRows(const LinearArgs& a, const PreparedActivations& p, LinearKernel kernel) {
  const size_t out = static_cast<size_t>(a.out);
  // AMX tiles; a last partial tile (out % 16 rows, row-major) through AVX-512.
  if (p.packed != nullptr) {
    const size_t full_rows = RowsInFullUnits(a.out, WeightLayout::kAmxTiles);
    if (full_rows > 0) amx::LinearRows(a, *p.packed, 0, full_rows);
    if (full_rows < out) DotRows(a, a.x, a.in, Table(true), full_rows, out);
    return;
  }
  if (kernel == LinearKernel::kAvx512Bf16) {
    // Whole 32-row groups through the group path, the rows past the last group (and all rows of
    // row-major weights) through the row kernel.
    const size_t grouped_rows = RowsInFullUnits(a.out, a.layout);
    if (grouped_rows > 0) {
      dot::GroupRowsAvx512Bf16(a.w, a.in, p.pairs, a.tokens, 0, grouped_rows, a.y, a.YStride());
      AddBias(a, 0, grouped_rows);
    }
    if (grouped_rows < out)
      DotRows(a, p.halves, 2 * static_cast<size_t>(a.in), dot::Avx512Bf16(), grouped_rows, out);
    return;
  }
  // Row-major weights (in % 32 != 0, or not arranged by the caller): kAmx takes the AVX-512 path.
  const DotTable& table = kernel == LinearKernel::kAvx2       ? dot::Avx2()
                          : kernel == LinearKernel::kPortable ? Table(false)
                                                              : Table(HasAvx512FBwVl());
  DotRows(a, p.x, p.x_stride, table, 0, out);
}

}  // namespace

size_t PoolUnitRows(WeightLayout layout) {
  switch (layout) {
    case WeightLayout::kRowMajor:
      return 16;
    case WeightLayout::kAmxTiles:
      return 2 * amx::kTileRows;
    case WeightLayout::kPairGroups:
      return dot::kPairGroupRows;
  }
  return 16;
}

const char* LinearKernelName(LinearKernel kernel) {
  switch (kernel) {
    case LinearKernel::kAmx:
      return "amx";
    case LinearKernel::kAvx512Bf16:
      return "avx512bf16";
    case LinearKernel::kAvx512:
      return "avx512";
    case LinearKernel::kAvx2:
      return "avx2";
    case LinearKernel::kPortable:
      return "portable";
  }
  return "?";
}

Result<LinearKernel> ParseLinearKernel(std::string_view name) {
  for (LinearKernel kernel : kLinearKernels) {
    if (name == LinearKernelName(kernel)) {
      if (!LinearKernelAvailable(kernel)) {
        return InvalidArgument("linear kernel '" + std::string(name) + "' does not run on this CPU");
      }
      return kernel;
    }
  }
  return InvalidArgument("unknown linear kernel '" + std::string(name) +
                         "' (expected amx, avx512bf16, avx512, avx2 or portable)");
}

bool LinearKernelAvailable(LinearKernel kernel) {
  switch (kernel) {
    case LinearKernel::kAmx:
      return HasAvx512FBwVl() && amx::Available();
    case LinearKernel::kAvx512Bf16:
      return HasAvx512Bf16();
    case LinearKernel::kAvx512:
      return HasAvx512FBwVl();
    case LinearKernel::kAvx2:
      return HasAvx2Fma();
    case LinearKernel::kPortable:
      return true;
  }
  return false;
}

LinearKernel BestLinearKernel() {
  static const LinearKernel best = [] {
    for (LinearKernel kernel : kLinearKernels) {
      if (LinearKernelAvailable(kernel)) return kernel;
    }
    return LinearKernel::kPortable;
  }();
  return best;
}

WeightLayout PreferredLayout(LinearKernel kernel, int in) {
  if (in % amx::kChunk != 0) return WeightLayout::kRowMajor;
  if (kernel == LinearKernel::kAmx) return WeightLayout::kAmxTiles;
  if (kernel == LinearKernel::kAvx512Bf16) return WeightLayout::kPairGroups;
  return WeightLayout::kRowMajor;
}

// Element (o, i) of a full unit (16-row block or 32-row group) of a tiled layout, from its start.
// kAmxTiles: tile i / 32, input pair (i % 32) / 2 (the tile row), output o (the pair of columns),
// element i % 2. kPairGroups: input pair i / 2, block o / 16, output o % 16, element i % 2.
size_t TiledIndex(WeightLayout layout, int o, int i) {
  if (layout == WeightLayout::kPairGroups) {
    return static_cast<size_t>(i / 2) * (2 * dot::kPairGroupRows) + o * 2 + i % 2;
  }
  const int chunk = i / amx::kChunk, pair = (i % amx::kChunk) / 2;
  return (static_cast<size_t>(chunk) * amx::kTileRows + pair) * (2 * amx::kTileRows) + o * 2 + i % 2;
}

void ArrangeWeights(uint16_t* w, int out, int in, WeightLayout layout) {
  if (layout == WeightLayout::kRowMajor) return;
  if (in % amx::kChunk != 0) {
    std::fprintf(stderr, "tpserve: ArrangeWeights: tiled layouts need in %% 32 == 0, got in = %d\n",
                 in);
    std::abort();
  }
  const size_t unit_rows = TiledUnitRows(layout);
  const size_t unit_elements = unit_rows * in;
  const size_t full_rows = RowsInFullUnits(out, layout);
  std::vector<uint16_t> unit(unit_elements);
  for (size_t row = 0; row < full_rows; row += unit_rows) {
    uint16_t* dst = w + row * in;
    std::copy_n(dst, unit_elements, unit.data());
    for (size_t o = 0; o < unit_rows; ++o) {
      for (int i = 0; i < in; ++i) {
        dst[TiledIndex(layout, static_cast<int>(o), i)] = unit[o * in + i];
      }
    }
  }
}

void ReadWeightRow(const uint16_t* w, int out, int in, WeightLayout layout, int row, float* dst) {
  if (static_cast<size_t>(row) >= RowsInFullUnits(out, layout)) {
    ConvertElements(w + static_cast<size_t>(row) * in, DType::kBF16, dst, DType::kF32, in);
    return;
  }
  const size_t unit_rows = TiledUnitRows(layout);
  const uint16_t* unit = w + static_cast<size_t>(row) / unit_rows * unit_rows * in;
  const int o = static_cast<int>(static_cast<size_t>(row) % unit_rows);
  for (int i = 0; i < in; ++i) dst[i] = BF16ToF32(unit[TiledIndex(layout, o, i)]);
}

void Linear(const LinearArgs& a, ThreadPool* pool, LinearKernel kernel) {
  const bool layout_fits = a.layout == WeightLayout::kRowMajor ||
                           (a.layout == WeightLayout::kAmxTiles && kernel == LinearKernel::kAmx) ||
                           (a.layout == WeightLayout::kPairGroups && kernel == LinearKernel::kAvx512Bf16);
  if (!layout_fits) {
    std::fprintf(stderr,
                 "tpserve: Linear: weights in the %s layout need the %s kernel, not %s\n",
                 a.layout == WeightLayout::kAmxTiles ? "AMX tile" : "pair group",
                 a.layout == WeightLayout::kAmxTiles ? "amx" : "avx512bf16", LinearKernelName(kernel));
    std::abort();
  }
  if (a.tokens <= 0 || a.out <= 0) return;  // nothing to compute (a step without logit rows)
  static std::atomic<uint64_t> calls{0};
  const uint64_t call = calls.fetch_add(1, std::memory_order_relaxed) + 1;
  auto prepared_here = [&]() -> const PreparedActivations& {  // this thread's, made once a call
    thread_local uint64_t prepared_call = 0;
    thread_local PreparedActivations prepared;
    if (prepared_call != call) {
      prepared = PrepareActivations(a, kernel);
      prepared_call = call;
    }
    return prepared;
  };
  // Rows [begin, end) (begin on a unit) of `owner`'s piece: from the owner's own memory when the
  // weights are placed per member (every output is what the whole matrix gives: the same rows in
  // the same layout), else from the matrix.
  const MemberRows* placed = a.placed;
  auto rows = [&](int owner, size_t begin, size_t end) {
    if (begin >= end) return;
    LinearArgs view = a;
    view.w = placed != nullptr ? placed->rows[owner] +
                                     (begin - placed->row_begin[owner]) * static_cast<size_t>(a.in)
                               : a.w + begin * static_cast<size_t>(a.in);
    view.bias = a.bias != nullptr ? a.bias + begin : nullptr;
    view.y = a.y + begin;
    view.out = static_cast<int>(end - begin);
    view.placed = nullptr;
    view.y_stride = a.YStride();
    ComputeRows(view, prepared_here(), kernel);
  };
  auto member_rows = [&](size_t m) {
    rows(static_cast<int>(m), placed->row_begin[m], placed->row_begin[m + 1]);
  };
  if (placed != nullptr &&
      (pool == nullptr || placed->rows.size() != static_cast<size_t>(pool->size()))) {
    // A placement for another pool size (tests): each member's rows as they lie.
    if (pool == nullptr) {
      for (size_t m = 0; m < placed->rows.size(); ++m) member_rows(m);
    } else {
      pool->ParallelFor(placed->rows.size(), 1, [&](size_t begin, size_t end) {
        for (size_t m = begin; m < end; ++m) member_rows(m);
      });
    }
  } else if (pool == nullptr) {
    rows(0, 0, a.out);
  } else {
    // The pool's pieces are the placement's (both ThreadPool::Piece of PoolUnitRows), and a
    // member done early takes chunks of a slower member's piece (ThreadPool::ParallelForBalanced).
    const size_t row_bytes = 2 * static_cast<size_t>(a.in);
    pool->ParallelForBalanced(a.out, PoolUnitRows(a.layout),
                              (kBalancedChunkBytes + row_bytes - 1) / row_bytes, rows);
  }
}

}  // namespace tpserve::cpu
