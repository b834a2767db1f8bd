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

ThreadPool::ThreadPool(int threads, int spin_iterations)
    : claims_(std::max(threads, 1)), spin_iterations_(spin_iterations) {
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

void ThreadPool::ParallelForBalanced(size_t n, size_t grain, size_t min_chunk,
                                     const std::function<void(int, size_t, size_t)>& fn) {
  const int members = size();
  grain = std::max<size_t>(grain, 1);
  if (workers_.empty() || n <= grain) {  // one piece, member 0's (as ParallelFor runs it)
    if (n > 0) fn(0, 0, n);
    return;
  }
  // The length of member m's chunks: chunk c of its piece starts c lengths past the piece's start.
  auto chunk_length = [&](int m) {
    const auto [begin, end] = Piece(n, grain, members, m);
    const size_t grains = (end - begin + grain - 1) / grain;
    const size_t min_grains = (min_chunk + grain - 1) / grain;
    return std::max<size_t>({1, min_grains, (grains + kChunksPerPiece - 1) / kChunksPerPiece}) *
           grain;
  };
  auto chunks_of = [&](int m) -> uint64_t {
    const auto [begin, end] = Piece(n, grain, members, m);
    const size_t length = chunk_length(m);
    return (end - begin + length - 1) / length;
  };
  uint64_t most_chunks = 0;
  for (int m = 0; m < members; ++m) most_chunks = std::max(most_chunks, chunks_of(m));
  // Pieces of one chunk: nothing another member could take, so ParallelFor, without the claims'
  // cache-line traffic (1-2% of a small matrix's call: docs/PERFORMANCE.md, session 32).
  if (most_chunks <= 1) {
    ParallelFor(static_cast<size_t>(members), 1, [&](size_t self_begin, size_t self_end) {
      for (size_t m = self_begin; m < self_end; ++m) {
        const auto [begin, end] = Piece(n, grain, members, static_cast<int>(m));
        if (begin < end) fn(static_cast<int>(m), begin, end);
      }
    });
    return;
  }
  for (int m = 0; m < members; ++m) {
    claims_[m].front_back.store(chunks_of(m) << 32, std::memory_order_relaxed);
  }
  auto run = [&](int owner, uint64_t chunk) {
    const auto [begin, end] = Piece(n, grain, members, owner);
    const size_t length = chunk_length(owner);
    const size_t first = begin + chunk * length;
    fn(owner, first, std::min(end, first + length));
  };
  // Claims one chunk of member m's piece: its owner the next from the front, another member the
  // last from the back while two or more are left.
  auto claim = [&](int m, bool from_front, uint64_t* chunk) {
    std::atomic<uint64_t>& claims = claims_[m].front_back;
    uint64_t packed = claims.load(std::memory_order_acquire);
    while (true) {
      const uint64_t front = packed & 0xffffffffu, back = packed >> 32;
      if (front + (from_front ? 0 : 1) >= back) return false;
      const uint64_t next = from_front ? (back << 32 | (front + 1)) : ((back - 1) << 32 | front);
      if (claims.compare_exchange_weak(packed, next, std::memory_order_acq_rel)) {
        *chunk = from_front ? front : back - 1;
        return true;
      }
    }
  };
  ParallelFor(static_cast<size_t>(members), 1, [&](size_t self_begin, size_t self_end) {
    for (size_t self = self_begin; self < self_end; ++self) {
      const int me = static_cast<int>(self);
      uint64_t chunk;
      while (claim(me, /*from_front=*/true, &chunk)) run(me, chunk);
      for (int step = 1; step < members; ++step) {
        const int other = (me + step) % members;
        while (claim(other, /*from_front=*/false, &chunk)) run(other, chunk);
      }
    }
  });
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
