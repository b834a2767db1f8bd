// How long one collective takes on a profile's fabric: NCCL's own tuning model (NCCL 2.20.3,
// src/graph/tuning.cc) — per algorithm (ring, tree, NVLS) and protocol (LL, LL128, Simple) a
// latency (base + per-hop latency of the link kind × steps) and a bus bandwidth (channels × the
// per-channel graph bandwidth under the protocol's factor and the per-generation caps), time =
// latency + bytes / algorithm bandwidth, and the minimum over what is enabled, as NCCL chooses.
// One term NCCL's model lacks: on two-socket hosts, a collective whose ranks span both sockets pays
// the profile's socket_hop_us on every step (each step waits for the hop over the inter-CPU link),
// and its per-channel bandwidth is capped by that link (fitted from public nccl-tests runs; see
// docs/PLANNER.md). A profile's fitted α/β for that collective and rank count (plan calibrate)
// replaces the model.
#pragma once

#include <string>

#include "comm/cost_model.h"
#include "planner/hardware_profile.h"

namespace tpserve::planner {

inline constexpr const char* kNcclTuningVersion = "2.20.3";

struct CollectiveEstimate {
  double time_us = 0;
  double latency_us = 0;      // the chosen path's fixed part
  double bandwidth_gb_s = 0;  // its algorithm bandwidth (bytes / (time - latency))
  std::string algorithm;      // ring | tree | nvls | fit | none
  std::string protocol;       // LL | LL128 | Simple | "" (fit, none)

  // Whether the fixed latency is the larger part of the time (small-message decode territory).
  bool latency_bound() const { return latency_us >= time_us - latency_us; }
};

// One algorithm and protocol, as NCCL_ALGO and NCCL_PROTO force them (names in any case: ring,
// Ring, RING). Empty: the fastest the model has, as NCCL's tuner chooses.
struct CollectivePath {
  std::string algorithm;  // ring | tree | nvls | ""
  std::string protocol;   // LL | LL128 | Simple | ""
  bool any() const { return algorithm.empty() && protocol.empty(); }
};

// `bytes`: nccl-tests' size (AllReduce: the buffer; AllGather: the gathered output). Ranks past
// one node use the profile's inter-node fabric; an error when the profile has none, or when a CPU
// profile has no fit for this collective and rank count. `only` restricts the choice to one path
// (a fit calibrated for that path, else the model's): NotFound when the profile's fabric has no
// such path (NVLS without NVSwitch, LL128 over PCIe, a tree AllGather).
Result<CollectiveEstimate> EstimateCollective(const HardwareProfile& profile, Collective collective, int ranks,
                                              double bytes, const CollectivePath& only = {});

// The link bandwidth a rank's busbw is measured against (GB/s, one direction): links × link_gb_s
// inside a node, the network's per-GPU bandwidth once `ranks` span nodes; 0 for CPU profiles.
double LinkPeakGbS(const HardwareProfile& profile, int ranks);

}  // namespace tpserve::planner
