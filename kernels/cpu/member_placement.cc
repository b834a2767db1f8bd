#include "kernels/cpu/member_placement.h"

#include <algorithm>

#include "kernels/cpu/thread_pool.h"

namespace tpserve::cpu {

std::vector<size_t> SplitRows(int out, size_t unit, int members) {
  std::vector<size_t> row_begin(members + 1, static_cast<size_t>(out));
  for (int m = 0; m < members; ++m) row_begin[m] = ThreadPool::Piece(out, unit, members, m).first;
  return row_begin;
}

MemberPlacement::MemberPlacement(std::span<const Matrix> matrices, int members,
                                 const std::function<void(size_t)>& copied) {
  members = std::max(members, 1);
  rows_.resize(matrices.size());
  std::vector<size_t> elements(members, 0);
  for (size_t i = 0; i < matrices.size(); ++i) {
    const Matrix& matrix = matrices[i];
    // Pieces begin on Linear's pool units, so that a piece in the matrix's layout is laid out as
    // the same rows of the whole matrix are.
    rows_[i].row_begin = SplitRows(matrix.out, PoolUnitRows(matrix.layout), members);
    for (int m = 0; m < members; ++m) {
      elements[m] += (rows_[i].row_begin[m + 1] - rows_[i].row_begin[m]) * matrix.in;
    }
  }
  // Reserved, then appended to: a page is touched only when its rows are copied (resizing would
  // zero every page first and hold two copies of the weights until the end).
  arenas_.resize(members);
  for (int m = 0; m < members; ++m) arenas_[m].reserve(elements[m]);
  for (size_t i = 0; i < matrices.size(); ++i) {
    const Matrix& matrix = matrices[i];
    rows_[i].rows.resize(members);
    for (int m = 0; m < members; ++m) {
      const size_t begin = rows_[i].row_begin[m], end = rows_[i].row_begin[m + 1];
      const size_t at = arenas_[m].size();  // within the reservation: no reallocation moves it
      arenas_[m].insert(arenas_[m].end(), matrix.w + begin * matrix.in, matrix.w + end * matrix.in);
      rows_[i].rows[m] = arenas_[m].data() + at;
    }
    if (copied) copied(i);
  }
}

}  // namespace tpserve::cpu
