// A fixed team of threads that split a loop's range among themselves (the caller is member 0).
// Each rank owns one; kernels split output rows with it, which never changes any element's
// arithmetic, so results are the same for any thread count.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace tpserve::cpu {

class ThreadPool {
 public:
  // threads >= 1, including the caller. Idle workers spin `spin_iterations` pauses before they
  // sleep: decode issues many short loops per step; a pool used once per step should not spin.
  explicit ThreadPool(int threads, int spin_iterations = 20000);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) on disjoint contiguous pieces covering [0, n), one per member, and
  // returns when all are done. Pieces are multiples of `grain` (but the last).
  void ParallelFor(size_t n, size_t grain, const std::function<void(size_t, size_t)>& fn);

  // The piece [begin, end) of [0, n) that ParallelFor gives member `index` of `members`: whole
  // grains (the last may be partial), the first ceil(n / grain) % members members one grain more.
  static std::pair<size_t, size_t> Piece(size_t n, size_t grain, int members, int index);

  // ParallelFor for members that may run at different speeds (a shared VM's core whose neighbour
  // is busy, a hybrid CPU's small cores): member m takes its own piece (Piece's) front to back in
  // chunks of whole grains, at least `min_chunk` long and at most kChunksPerPiece to a piece, and a
  // member done with its own takes the others' unclaimed chunks from the back, while a piece has
  // two or more left (its owner keeps the last, the one its own stream reaches next). So the call
  // ends about when the work does rather than when the slowest piece does. fn(owner, begin, end)
  // runs one chunk [begin, end) of member `owner`'s piece, on whichever thread claimed it: the
  // chunks are the same in every call with the same n, grain, min_chunk and size(); which thread
  // runs one is not.
  static constexpr size_t kChunksPerPiece = 16;
  void ParallelForBalanced(size_t n, size_t grain, size_t min_chunk,
                           const std::function<void(int owner, size_t begin, size_t end)>& fn);

 private:
  void WorkerLoop(int index);

  // One member's piece in a ParallelForBalanced call: its chunks [front, back), the unclaimed
  // ones, packed as back << 32 | front so that the owner (from the front) and a thief (from the
  // back) claim with one compare-and-swap. A cache line each.
  struct alignas(64) PieceClaims {
    std::atomic<uint64_t> front_back{0};
  };

  std::vector<std::thread> workers_;
  std::vector<PieceClaims> claims_;  // [size()], ParallelForBalanced's
  std::mutex mutex_;
  std::condition_variable wake_;
  const std::function<void(size_t, size_t)>* task_ = nullptr;
  size_t n_ = 0, grain_ = 1;
  std::atomic<uint64_t> generation_{0};  // bumped per ParallelFor; workers spin on it briefly
  std::atomic<int> pending_{0};
  bool stop_ = false;
  int spin_iterations_;
};

}  // namespace tpserve::cpu
