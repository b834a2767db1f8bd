// Collectives for ranks that are threads of one process. Ranks exchange pointers to their own
// buffers through a shared group and read each other's memory directly: no copies through a
// staging area, no system calls and no allocation per call. Ranks wait for each other on a spin
// barrier (with yields, so more ranks than cores still make progress).
//
// AllReduce has two paths with the same arithmetic (every element summed in rank order):
//  - latency path (small messages, decode): every rank sums the whole message itself;
//  - bandwidth path (large messages, prefill): each rank sums 1/world of the elements (a
//    reduce-scatter), then every rank copies every rank's chunk (an all-gather).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <vector>

#include "comm/communicator.h"

namespace tpserve {

class InProcessGroup;

class InProcessCommunicator final : public Communicator {
 public:
  // One communicator per rank, all sharing one group. With a timeout, a rank that waits longer
  // than that for its peers in one collective fails it (DEADLINE_EXCEEDED) and breaks the group:
  // every later collective of every rank fails at once (UNAVAILABLE). 0: wait forever.
  static std::vector<std::unique_ptr<InProcessCommunicator>> CreateGroup(
      int world_size, std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

  // Messages of at least this many bytes take the bandwidth path.
  static constexpr size_t kBandwidthPathBytes = 256 * 1024;

  int rank() const override { return rank_; }
  int world_size() const override;

  Status AllReduceSum(float* data, size_t count) override;
  Status AllGather(const float* input, float* output, size_t count) override;
  Status ReduceScatterSum(const float* input, float* output, size_t count) override;
  Status Broadcast(float* data, size_t count, int root) override;
  Status Barrier() override;
  void Abort() override;

  // Forces one AllReduce path (benchmarks and tests); kAuto chooses by message size.
  enum class Path { kAuto, kLatency, kBandwidth };
  void set_path(Path path) { path_ = path; }

 private:
  InProcessCommunicator(std::shared_ptr<InProcessGroup> group, int rank);

  std::shared_ptr<InProcessGroup> group_;
  int rank_;
  Path path_ = Path::kAuto;
  Status Wait();  // the group's barrier, within its timeout
  int NextParity() { return static_cast<int>(calls_++ & 1); }

  uint64_t barrier_sense_ = 0;
  uint64_t calls_ = 0;          // collectives this rank has entered (all ranks enter the same ones)
  std::vector<float> scratch_;  // this rank's reduced elements, reused across calls
};

}  // namespace tpserve
