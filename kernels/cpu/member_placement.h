// Weights placed for a thread pool: each member's rows of a sequence of matrices, back to back in
// that member's own memory, in the order the matrices are called (a decode step's layer Linears).
// A member's stream of weights then runs on from one call into the next, and the hardware
// prefetcher with it, where separate matrices leave each call to start cold. Linear reads a placed
// matrix through LinearArgs::placed: member m of the pool computes the outputs of its own rows.
// On an AMD EPYC (Zen 5, 2 threads) the 48 layer Linears of a decode step at 8 tokens ran
// 1.08-1.12x faster placed than as separate matrices (docs/PERFORMANCE.md, session 28).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "common/huge_page_allocator.h"
#include "kernels/cpu/linear.h"

namespace tpserve::cpu {

class MemberPlacement {
 public:
  struct Matrix {
    const uint16_t* w = nullptr;  // [out, in] bf16, in `layout`
    int out = 0;
    int in = 0;
    WeightLayout layout = WeightLayout::kRowMajor;
  };

  MemberPlacement() = default;
  // Copies `matrices` for a pool of `members`: matrix i's rows split into `members` pieces of
  // whole units (PoolUnitRows: Linear's split among a pool) as evenly as ThreadPool
  // splits a range, piece m of every matrix after piece m of the one before it. The copies are
  // the placement's own: `copied(i)`, when given, is called once matrix i is copied (to free it
  // there, so that the process holds one copy of the weights and one matrix more at most).
  MemberPlacement(std::span<const Matrix> matrices, int members,
                  const std::function<void(size_t)>& copied = nullptr);

  const MemberRows& rows(size_t matrix) const { return rows_[matrix]; }
  size_t size() const { return rows_.size(); }

 private:
  std::vector<std::vector<uint16_t, HugePageAllocator<uint16_t>>> arenas_;  // [members]
  std::vector<MemberRows> rows_;                                            // [matrices]
};

// The rows [row_begin[m], row_begin[m + 1]) of each of `members` pieces of `out` rows in units of
// `unit` rows: ThreadPool::Piece's split (the last unit may be partial).
std::vector<size_t> SplitRows(int out, size_t unit, int members);

}  // namespace tpserve::cpu
