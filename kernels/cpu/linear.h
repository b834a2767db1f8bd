// y = x · Wᵀ (+ bias) with bf16 weights in Hugging Face's [out_features, in_features] layout,
// f32 activations and f32 accumulation: the GEMV/GEMM of every projection on the CPU backend.
//
// Batch invariance: for a given kernel and shape, every output element y[t, o] is the dot product
// of row t of x and row o of W computed by the same instruction sequence (AVX-512: 16-lane partial
// sums over `in` in order, then one fixed horizontal reduction; AVX2: linear_avx2.cc;
// AVX-512 BF16: linear_avx512bf16.cc; AMX: linear_amx.h), whatever the number of tokens, the
// tiling or the thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tpserve::cpu {

class ThreadPool;

// How a weight matrix [out, in] is laid out in memory (both tiled layouts only where in % 32 == 0;
// rows past the last full block or group stay row-major):
// - kAmxTiles: each full block of 16 rows (outputs) as in / 32 consecutive 1 KiB AMX B tiles, one
//   per chunk of 32 inputs: 16 input pairs × 16 outputs × 2, i.e. tile[p][o][e] = W[o][32 chunk +
//   2p + e]. The AMX kernel streams it in memory order.
// - kPairGroups: each full group of 32 rows as [in / 2 input pairs][2 blocks][16 outputs][2], i.e.
//   group[p][b][o][e] = W[16 b + o][2p + e]: input pair p of the group's two 16-output blocks is
//   two adjacent 64-byte lines. The AVX-512 BF16 kernel streams it in memory order, both blocks'
//   sums in flight at once (linear_avx512bf16.cc).
enum class WeightLayout { kRowMajor, kAmxTiles, kPairGroups };

// A matrix placed for a thread pool (member_placement.h): member m's rows
// [row_begin[m], row_begin[m + 1]) at rows[m], each piece a multiple of the layout's unit from
// row 0 (in `layout`, as the whole matrix would be).
struct MemberRows {
  std::vector<size_t> row_begin;      // [members + 1], row_begin[0] = 0, the last = out
  std::vector<const uint16_t*> rows;  // [members]
};

struct LinearArgs {
  const float* x = nullptr;       // [tokens, in]
  const uint16_t* w = nullptr;    // [out, in] bf16, in `layout` (unused when `placed` is set)
  const float* bias = nullptr;    // [out] or nullptr
  float* y = nullptr;             // [tokens, y_stride]: row t's outputs at y + t * YStride()
  int tokens = 0;
  int in = 0;
  int out = 0;
  WeightLayout layout = WeightLayout::kRowMajor;
  // The weights' rows placed per pool member instead of `w`: member m of the pool computes the
  // outputs of its own rows (but for chunks a faster member takes over: kBalancedChunkBytes), so
  // each thread reads its rows of consecutive matrices from one stream of memory.
  const MemberRows* placed = nullptr;
  size_t y_stride = 0;  // floats between tokens' rows of y; 0: out

  size_t YStride() const { return y_stride != 0 ? y_stride : static_cast<size_t>(out); }
};

// The instruction sets Linear can run on. Each is deterministic and batch
// invariant on its own; they differ from each other in rounding (AMX multiplies the activations
// as a bf16 hi + lo pair, linear_amx.h, and so does AVX-512 BF16), so one engine uses one kernel
// for every step.
enum class LinearKernel {
  kAmx,         // AMX-BF16 tiles on kAmxTiles weights (other shapes, rows and layouts use kAvx512)
  kAvx512Bf16,  // AVX-512 BF16 dot products (VDPBF16PS), the activations as a bf16 hi + lo pair
  kAvx512,      // AVX-512 f32 FMA on the bf16 weights widened to f32
  kAvx2,        // AVX2 f32 FMA, 8 lanes, on the widened weights
  kPortable,    // plain C++ with the same lane structure
};

// Every kernel, in the order `auto` prefers them (BestLinearKernel picks the first this CPU runs):
// measured fastest first. AVX-512 BF16 comes before AVX-512: on the AMD EPYC (Zen 5 class) these
// were measured on, it decodes batch 8 17-25% faster and prefills 512 tokens 28-35% faster; at
// batch 1, on its pair-group layout, the two are even (within the run-to-run noise of one
// process's interleaved points: docs/PERFORMANCE.md).
inline constexpr LinearKernel kLinearKernels[] = {LinearKernel::kAmx, LinearKernel::kAvx512Bf16,
                                                  LinearKernel::kAvx512, LinearKernel::kAvx2,
                                                  LinearKernel::kPortable};

// "amx", "avx512bf16", "avx512", "avx2", "portable"
const char* LinearKernelName(LinearKernel kernel);
Result<LinearKernel> ParseLinearKernel(std::string_view name);
bool LinearKernelAvailable(LinearKernel kernel);
LinearKernel BestLinearKernel();  // the fastest available on this CPU

// kAmxTiles weights need the kAmx kernel, kPairGroups weights the kAvx512Bf16 kernel; kAmx on
// row-major weights runs the AVX-512 path.
void Linear(const LinearArgs& args, ThreadPool* pool, LinearKernel kernel = BestLinearKernel());

// With a pool, Linear splits a matrix's rows as ThreadPool::ParallelForBalanced does: each member
// takes its own piece front to back, and one done early takes chunks of at least this many bytes
// of weights from the back of a slower member's piece, so that a core running slower than the
// others (a busy neighbour on a shared VM, a hybrid CPU's small core) no longer sets the time of
// every call. A piece of a single chunk stays with its member (the small model's layer matrices:
// gate/up's pieces, the largest, are 3 MiB; the LM head's 98 MiB pieces take 16 chunks). Which
// thread computes a row never changes its arithmetic. On the 2-vCPU AMD EPYC a decode step's
// Linears ran as fast as with the static split while the two vCPUs ran alike (0.997-1.019x) and
// the LM head 1.05-1.23x faster while one ran 1.15-1.6x slower (docs/PERFORMANCE.md, session 32).
inline constexpr size_t kBalancedChunkBytes = size_t{4} << 20;

// The rows of the unit Linear splits a matrix in `layout` among pool members in (16 row-major;
// 32 tiled: two AMX tiles, one pair group): every member's rows start on a multiple of it, so a
// piece is laid out as the same rows of the whole matrix are (member_placement.h relies on it).
size_t PoolUnitRows(WeightLayout layout);

// The layout `kernel` reads fastest for a matrix with `in` columns.
WeightLayout PreferredLayout(LinearKernel kernel, int in);

// Rearranges a row-major w [out, in] into `layout`, in place (the tiled layouts: in % 32 == 0, as
// PreferredLayout gives them).
void ArrangeWeights(uint16_t* w, int out, int in, WeightLayout layout);

// Row `row` of w [out, in] (in `layout`), widened to f32: an embedding lookup in a tied LM head.
void ReadWeightRow(const uint16_t* w, int out, int in, WeightLayout layout, int row, float* dst);

}  // namespace tpserve::cpu
