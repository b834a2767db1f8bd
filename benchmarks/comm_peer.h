// The peer of `bench-comm --peer mpi`: the same collective, sizes and iterations timed by Open MPI
// (tpserve-mpi-peer under mpirun, shared memory only) in the same run, for a side-by-side ratio.
#pragma once

#include <string>
#include <vector>

#include "comm/cost_model.h"
#include "common/status.h"

namespace tpserve {

struct PeerRow {
  size_t bytes = 0;
  double time_us = 0;  // mean per call, rank 0, between barriers (as bench-comm times its own)
  size_t wrong = 0;    // result elements that differ from the definition, all ranks
};

struct PeerSweep {
  std::string name;     // "mpi"
  std::string library;  // e.g. "Open MPI v4.1.4"
  std::string command;  // the command line that ran it
  std::vector<PeerRow> rows;
};

// Runs `ranks` MPI processes over `sizes` (bytes as bench-comm counts them).
Result<PeerSweep> RunMpiPeer(Collective collective, int ranks, const std::vector<size_t>& sizes, int iters,
                             int warmup);

// Parses tpserve-mpi-peer's JSON line (exposed for tests).
Result<PeerSweep> ParseMpiPeerOutput(const std::string& text);

}  // namespace tpserve
