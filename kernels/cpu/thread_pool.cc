#include "kernels/cpu/thread_pool.h"

#include <pthread.h>

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tpserve::cpu {

std::pair<size_t, size_t> ThreadPool::Piece(size_t n, size_t grain, int members, int index) {
  const size_t units = (n + grain - 1) / grain;
  const size_t per = units / members, extra = units % members;
  const size_t first = index * per + std::min<size_t>(index, extra);
  const size_t count = per + (static_cast<size_t>(index) < extra ? 1 : 0);
  return {std::min(n, first * grain), std::min(n, (first + count) * grain)};
}

ThreadPool::ThreadPool(int threads, int spin_iterations) : spin_iterations_(spin_iterations) {
  for (int i = 1; i < std::max(threads, 1); ++i) {
    workers_.emplace_back([this, i] {
      pthread_setname_np(pthread_self(), "tps-pool");
      WorkerLoop(i);
    });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::ParallelFor(size_t n, size_t grain,
                             const std::function<void(size_t, size_t)>& fn) {
  if (workers_.empty() || n <= grain) {
    if (n > 0) fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    task_ = &fn;
    n_ = n;
    grain_ = grain;
    pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  auto [begin, end] = Piece(n, grain, size(), 0);
  if (begin < end) fn(begin, end);
  int spins = 0;
  while (pending_.load(std::memory_order_acquire) != 0) {
    if (++spins < 4000) {
#if defined(__x86_64__)
      _mm_pause();
#endif
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  while (true) {
    // Decode issues many short loops per step: spin a little before sleeping.
    for (int spins = 0; spins < spin_iterations_ && generation_.load(std::memory_order_acquire) == seen;
         ++spins) {
#if defined(__x86_64__)
      _mm_pause();
#endif
    }
    const std::function<void(size_t, size_t)>* task;
    size_t n, grain;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_.load() != seen; });
      if (stop_) return;
      seen = generation_.load();
      task = task_;
      n = n_;
      grain = grain_;
    }
    auto [begin, end] = Piece(n, grain, size(), index);
    if (begin < end) (*task)(begin, end);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace tpserve::cpu
