// The AMX-BF16 path of Linear (kernels/cpu/linear.h), for CPUs with Intel AMX (Sapphire Rapids
// and later).
//
// A tile multiply (TDPBF16PS) takes bf16 on both sides, so each f32 activation x is split into
// two bf16 numbers, hi = bf16(x) and lo = bf16(x - hi), and y = W·hi + W·lo: the activation keeps
// 16 bits of mantissa (the weights themselves have 8), without the f32-to-bf16 rounding of the
// activations that a plain bf16 dot product would add. The activations are the A operand: one
// tile holds 8 tokens, rows 0-7 their hi parts and rows 8-15 their lo parts, 32 inputs per row.
// The weights are the B operand, arranged at load (WeightLayout::kAmxTiles) so that each tile is
// 1 KiB of memory; a C tile row is then one token's 16 consecutive outputs, stored as one line.
//
// Batch invariance: y[t, o] is the AMX dot product of token t's two rows with output o's column,
// chunk by chunk of 32 along `in` in order, then hi + lo + bias, for every batch size and tiling
// (a tile element never depends on the tile's other rows or columns).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cpu/linear.h"

namespace tpserve::cpu::amx {

constexpr int kTileRows = 16;        // outputs (weight rows) per B tile
constexpr int kChunk = 32;           // bf16 elements of `in` per tile step
constexpr int kTokensPerGroup = 8;   // tokens per A tile (hi and lo rows)
constexpr int kTileElements = kTileRows * kChunk;  // bf16 per tile (A or B): 512, 1 KiB

// Whether this CPU has AMX-BF16 and Linux let the process use the tile registers (asked once).
bool Available();

// Activations as AMX A tiles: for each group of 8 tokens and each chunk of 32 inputs, a 1 KiB tile
// of 16 rows (8 tokens' hi parts, then their lo parts) × 32 bf16.
struct PackedActivations {
  std::vector<uint16_t> data;  // [groups, in / 32, 16 rows, 32]
  int tokens = 0;
  int in = 0;
  int groups() const { return (tokens + kTokensPerGroup - 1) / kTokensPerGroup; }
  const uint16_t* tile(int group, int chunk) const { return data.data() + TileOffset(group, chunk); }
  uint16_t* tile(int group, int chunk) { return data.data() + TileOffset(group, chunk); }
  size_t TileOffset(int group, int chunk) const {
    return (static_cast<size_t>(group) * (in / kChunk) + chunk) * kTileElements;
  }
};

// x: [tokens, in] f32 with in % 32 == 0.
void Pack(const float* x, int tokens, int in, PackedActivations* packed);

// Outputs [row_begin, row_end) of y = x · Wᵀ (+ bias); both bounds multiples of 16, the weights in
// WeightLayout::kAmxTiles.
void LinearRows(const LinearArgs& args, const PackedActivations& x, size_t row_begin,
                size_t row_end);

}  // namespace tpserve::cpu::amx
