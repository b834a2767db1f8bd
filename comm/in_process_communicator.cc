#include "comm/in_process_communicator.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tpserve {

// State shared by the ranks of one group.
class InProcessGroup {
 public:
  InProcessGroup(int world_size, std::chrono::milliseconds timeout)
      : world_size_(world_size),
        timeout_(timeout),
        slots_{std::vector<Slot>(world_size), std::vector<Slot>(world_size)} {}

  int world_size() const { return world_size_; }

  // Sense-reversing barrier: the last rank to arrive flips the generation. Fails when the group
  // is broken (a rank aborted or timed out) or, with a timeout, when the peers do not all arrive
  // in time; either way the group stays broken, as a failed NCCL communicator does.
  Status Wait(int rank, uint64_t* local_generation) {
    if (broken_.load(std::memory_order_acquire)) return Broken(rank);
    const uint64_t generation = *local_generation;
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == world_size_) {
      arrived_.store(0, std::memory_order_relaxed);
      generation_.store(generation + 1, std::memory_order_release);
    } else {
      int spins = 0;
      std::chrono::steady_clock::time_point deadline{};
      while (generation_.load(std::memory_order_acquire) == generation) {
        if (++spins < 2000) {
#if defined(__x86_64__)
          _mm_pause();
#endif
          continue;
        }
        // Past the spin phase (a peer is slow or the cores are shared): yield, and watch the clock.
        std::this_thread::yield();
        if (broken_.load(std::memory_order_acquire)) return Broken(rank);
        if (timeout_.count() <= 0) continue;
        const auto now = std::chrono::steady_clock::now();
        if (spins == 2000) deadline = now + timeout_;
        if (now > deadline) {
          Abort();
          return Status(StatusCode::kDeadlineExceeded, "rank " + std::to_string(rank) + " waited " +
                                                           std::to_string(timeout_.count()) +
                                                           " ms for its peers in a collective (a stalled rank?)");
        }
      }
    }
    *local_generation = generation + 1;
    return Status::Ok();
  }

  void Abort() { broken_.store(true, std::memory_order_release); }

  // What a rank publishes for one collective. Two sets alternate between consecutive calls, so
  // a rank may publish for call n+1 while a slower rank still reads call n's pointers (nobody
  // can reach call n+2 before everyone has left call n).
  struct alignas(64) Slot {
    const float* input = nullptr;
    const float* result = nullptr;  // bandwidth path: this rank's reduced chunk
  };
  Slot& slot(int parity, int rank) { return slots_[parity][rank]; }

 private:
  Status Broken(int rank) const {
    return Status(StatusCode::kUnavailable,
                  "rank " + std::to_string(rank) + ": the in-process group failed (a peer aborted or timed out)");
  }

  const int world_size_;
  const std::chrono::milliseconds timeout_;  // 0: wait forever
  std::atomic<bool> broken_{false};
  std::vector<Slot> slots_[2];
  alignas(64) std::atomic<int> arrived_{0};
  alignas(64) std::atomic<uint64_t> generation_{0};
};

namespace {

// out[i - begin] = (((in[0][i] + in[1][i]) + in[2][i]) + ...) for i in [begin, end).
void SumInRankOrder(InProcessGroup& group, int parity, float* out, size_t begin, size_t end) {
  const size_t n = end - begin;
  const int world = group.world_size();
  const float* first = group.slot(parity, 0).input + begin;
  const float* second = world > 1 ? group.slot(parity, 1).input + begin : nullptr;
  if (second != nullptr) {
    for (size_t i = 0; i < n; ++i) out[i] = first[i] + second[i];
  } else {
    std::copy(first, first + n, out);
  }
  for (int r = 2; r < world; ++r) {
    const float* in = group.slot(parity, r).input + begin;
    for (size_t i = 0; i < n; ++i) out[i] += in[i];
  }
}

}  // namespace

std::vector<std::unique_ptr<InProcessCommunicator>> InProcessCommunicator::CreateGroup(
    int world_size, std::chrono::milliseconds timeout) {
  auto group = std::make_shared<InProcessGroup>(world_size, timeout);
  std::vector<std::unique_ptr<InProcessCommunicator>> ranks;
  for (int r = 0; r < world_size; ++r) {
    ranks.emplace_back(new InProcessCommunicator(group, r));
  }
  return ranks;
}

InProcessCommunicator::InProcessCommunicator(std::shared_ptr<InProcessGroup> group, int rank)
    : group_(std::move(group)), rank_(rank) {}

int InProcessCommunicator::world_size() const { return group_->world_size(); }

Status InProcessCommunicator::Barrier() { return Wait(); }

Status InProcessCommunicator::Wait() { return group_->Wait(rank_, &barrier_sense_); }

void InProcessCommunicator::Abort() { group_->Abort(); }

Status InProcessCommunicator::AllReduceSum(float* data, size_t count) {
  const int world = world_size();
  if (world == 1 || count == 0) return Status::Ok();  // every rank has the same count
  const int parity = NextParity();
  const bool bandwidth = path_ == Path::kBandwidth ||
                         (path_ == Path::kAuto && count * sizeof(float) >= kBandwidthPathBytes);
  const size_t chunk = bandwidth ? (count + world - 1) / world : count;
  const size_t begin = bandwidth ? std::min(count, chunk * rank_) : 0;
  const size_t end = std::min(count, begin + chunk);
  group_->slot(parity, rank_).input = data;
  RETURN_IF_ERROR(Wait());  // every rank's input is published
  // Only now may scratch_ move: until this barrier a slower rank can still be copying the
  // previous call's result out of it.
  if (scratch_.size() < chunk) scratch_.resize(chunk);
  group_->slot(parity, rank_).result = scratch_.data();  // read by others only after the next barrier
  SumInRankOrder(*group_, parity, scratch_.data(), begin, end);
  RETURN_IF_ERROR(Wait());  // every input has been read; every chunk is reduced
  if (!bandwidth) {
    std::memcpy(data, scratch_.data(), count * sizeof(float));
    return Status::Ok();
  }
  for (int r = 0; r < world; ++r) {
    const size_t r_begin = std::min(count, chunk * r), r_end = std::min(count, r_begin + chunk);
    std::memcpy(data + r_begin, group_->slot(parity, r).result, (r_end - r_begin) * sizeof(float));
  }
  // A rank resizes or overwrites its scratch only after the next call's first barrier, which
  // every rank reaches only once it has finished copying here.
  return Status::Ok();
}

Status InProcessCommunicator::AllGather(const float* input, float* output, size_t count) {
  const int parity = NextParity();
  group_->slot(parity, rank_).input = input;
  RETURN_IF_ERROR(Wait());
  for (int r = 0; r < world_size(); ++r) {
    if (count > 0) std::memcpy(output + r * count, group_->slot(parity, r).input, count * sizeof(float));
  }
  RETURN_IF_ERROR(Wait());
  return Status::Ok();
}

Status InProcessCommunicator::ReduceScatterSum(const float* input, float* output, size_t count) {
  const int parity = NextParity();
  group_->slot(parity, rank_).input = input;
  RETURN_IF_ERROR(Wait());
  const size_t offset = count * rank_;
  if (count > 0) std::memcpy(output, group_->slot(parity, 0).input + offset, count * sizeof(float));
  for (int r = 1; r < world_size(); ++r) {
    const float* in = group_->slot(parity, r).input + offset;
    for (size_t i = 0; i < count; ++i) output[i] += in[i];
  }
  RETURN_IF_ERROR(Wait());
  return Status::Ok();
}

Status InProcessCommunicator::Broadcast(float* data, size_t count, int root) {
  if (root < 0 || root >= world_size()) {
    return InvalidArgument("Broadcast root " + std::to_string(root) + " is not a rank");
  }
  const int parity = NextParity();
  group_->slot(parity, rank_).input = data;
  RETURN_IF_ERROR(Wait());
  if (rank_ != root && count > 0) std::memcpy(data, group_->slot(parity, root).input, count * sizeof(float));
  RETURN_IF_ERROR(Wait());
  return Status::Ok();
}

}  // namespace tpserve
