// Fault injection for tests: the engine's one test-only hook, compiled in and off by default
// (`--debug-fault KIND@STEP[:RANK]`, hidden from --help). Each kind is a failure that production
// has seen and that the engine-failed path must turn into UNAVAILABLE, NOT_SERVING and an exit:
//  - fail:       every rank returns an error at step N (a device error seen by all ranks);
//  - throw:      one rank throws an exception mid-step (a bug in a kernel wrapper);
//  - stall:      one rank stops before its first collective of step N (a hung kernel or peer);
//  - comm-error: one rank's collective fails at step N (a NIC or NCCL error on one GPU).
// A stalled rank waits until the engine releases it at destruction (or ten minutes), so tests end.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace tpserve {

enum class FaultKind { kNone, kFail, kThrow, kStall, kCommError };

struct FaultInjection {
  FaultKind kind = FaultKind::kNone;
  int64_t step = -1;  // the rank's forward pass number (0-based)
  int rank = -1;      // global rank; -1: every rank (fail) or rank 0 (the others)

  // "KIND@STEP" or "KIND@STEP:RANK", KIND one of fail, throw, stall, comm-error.
  static Result<FaultInjection> Parse(const std::string& spec);
  std::string ToString() const;

  // Does `rank` inject this fault at forward pass `forward`?
  bool Hits(int64_t forward, int rank_id) const {
    if (kind == FaultKind::kNone || forward != step) return false;
    return kind == FaultKind::kFail ? (rank < 0 || rank == rank_id) : rank_id == (rank < 0 ? 0 : rank);
  }
};

// Where stalled ranks wait; the engine releases them when it is destroyed.
class StallRelease {
 public:
  void Release() { released_.store(true, std::memory_order_release); }
  // Blocks until Release() (or ten minutes).
  void Wait() const;

 private:
  std::atomic<bool> released_{false};
};

// Acts out `fault` for the rank about to run its forward pass: an error Status (fail, comm-error:
// the caller returns it where the fault belongs), an exception (throw), or a wait (stall).
// Ok when the fault does not hit this rank at this pass.
Status InjectFault(const FaultInjection& fault, int64_t forward, int rank, const StallRelease* release);

}  // namespace tpserve
