// The AMX-BF16 path of Linear (kernels/cpu/linear.h), for CPUs with Intel AMX (Sapphire Rapids
// and later).
//
// A tile multiply (TDPBF16PS) takes bf16 on both sides, so each f32 activation x is split into
// two bf16 numbers, hi = bf16(x) and lo = bf16(x - hi), and y = W·hi + W·lo: the activation keeps
// 16 bits of mantissa (the weights themselves have 8), without the f32-to-bf16 rounding of the
// activations that a plain bf16 dot product would add. One B tile holds 8 tokens: columns 0-7
// their hi parts, columns 8-15 their lo parts.
//
// Batch invariance: y[t, o] is the AMX dot product of weight row o with token t's two columns,
// chunk by chunk of 32 along `in` in order, then hi + lo + bias, for every batch size and tiling
// (a tile element never depends on the tile's other rows or columns).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cpu/linear.h"

namespace tpserve::cpu::amx {

constexpr int kTileRows = 16;        // weight rows (outputs) per A tile
constexpr int kChunk = 32;           // bf16 elements of `in` per tile step
constexpr int kTokensPerGroup = 8;   // tokens per B tile (hi and lo columns)

// Whether this CPU has AMX-BF16 and Linux let the process use the tile registers (asked once).
bool Available();

// Activations in the layout of AMX B tiles: for each group of 8 tokens and each chunk of 32
// inputs, a 1 KiB tile of 16 rows (input pairs) × 16 columns (8 hi + 8 lo) × 2 bf16.
struct PackedActivations {
  std::vector<uint16_t> data;  // [groups, in / 32, 16 pairs, 16 columns, 2]
  int tokens = 0;
  int in = 0;
  int groups() const { return (tokens + kTokensPerGroup - 1) / kTokensPerGroup; }
  const uint16_t* tile(int group, int chunk) const { return data.data() + TileOffset(group, chunk); }
  uint16_t* tile(int group, int chunk) { return data.data() + TileOffset(group, chunk); }
  size_t TileOffset(int group, int chunk) const {
    return (static_cast<size_t>(group) * (in / kChunk) + chunk) * 512;  // 512 bf16 = 1 KiB
  }
};

// x: [tokens, in] f32 with in % 32 == 0.
void Pack(const float* x, int tokens, int in, PackedActivations* packed);

// Rows [row_begin, row_end) of y = x · Wᵀ (+ bias); both bounds multiples of 16.
void LinearRows(const LinearArgs& args, const PackedActivations& x, size_t row_begin,
                size_t row_end);

}  // namespace tpserve::cpu::amx
