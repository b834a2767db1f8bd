// The latency–bandwidth (α–β) model of a collective: t(S) = α + S·f(n)/β, where S is the message
// size as nccl-tests counts it, f(n) the bus-bandwidth factor of the collective at n ranks, and β
// the bus bandwidth. Below S* = α·β / f(n) the latency term dominates: decode's small AllReduces
// live there. Shared by bench-comm and (later) the TP planner.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tpserve {

enum class Collective { kAllReduce, kAllGather, kReduceScatter, kBroadcast };

Result<Collective> ParseCollective(const std::string& name);
std::string CollectiveName(Collective collective);

// nccl-tests' busbw factor: AllReduce 2(n-1)/n; AllGather, ReduceScatter (n-1)/n; Broadcast 1.
double BusBandwidthFactor(Collective collective, int ranks);

struct AlphaBeta {
  double alpha_s = 0;             // fixed cost per call
  double beta_bytes_per_s = 0;    // bus bandwidth
  double crossover_bytes = 0;     // size where both terms are equal
};

// Fit of t = α + (S·f)/β over (S bytes, t seconds) samples, least squares on relative error.
Result<AlphaBeta> FitAlphaBeta(const std::vector<std::pair<double, double>>& samples, double factor);

}  // namespace tpserve
