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

 private:
  void WorkerLoop(int index);

  std::vector<std::thread> workers_;
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
