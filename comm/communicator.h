// Collectives among the ranks of one tensor-parallel group. Implementations: in-process (ranks
// are threads, this file's sibling), NCCL (later), MPI (peer benchmark, later).
//
// Determinism contract: AllReduce sums every element in rank order (((r0 + r1) + r2) + ...),
// whatever algorithm moves the bytes and whatever the message size, so results never depend on
// batch composition (see docs/ARCHITECTURE.md, "Determinism").
#pragma once

#include <cstddef>

#include "common/status.h"

namespace tpserve {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // data: [count] on every rank; afterwards every rank holds the rank-ordered sum.
  virtual Status AllReduceSum(float* data, size_t count) = 0;
  // input: [count] per rank; output: [world_size * count], rank r's input at offset r * count.
  virtual Status AllGather(const float* input, float* output, size_t count) = 0;
  // input: [world_size * count]; output: [count] = rank-ordered sum of every rank's chunk `rank`.
  virtual Status ReduceScatterSum(const float* input, float* output, size_t count) = 0;
  // data: [count]; afterwards every rank holds root's data.
  virtual Status Broadcast(float* data, size_t count, int root) = 0;
  virtual Status Barrier() = 0;
  // Breaks the group after a failure on this rank, so that peers waiting in a collective fail
  // at once instead of at their timeout (ncclCommAbort's role). Best effort; the group is dead.
  virtual void Abort() {}
};

}  // namespace tpserve
