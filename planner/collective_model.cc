#include "planner/collective_model.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string_view>
#include <limits>

namespace tpserve::planner {
namespace {

// NCCL 2.20.3 src/graph/tuning.cc. Algorithms: tree, ring, (collnet: not modelled), NVLS;
// protocols LL, LL128, Simple. Latencies in µs, bandwidths in GB/s.
enum Algo { kTree = 0, kRing = 1, kNvls = 2 };
enum Proto { kLL = 0, kLL128 = 1, kSimple = 2 };
constexpr const char* kAlgoNames[] = {"tree", "ring", "nvls"};
constexpr const char* kProtoNames[] = {"LL", "LL128", "Simple"};

constexpr double kBaseLat[3][3] = {{6.8, 14.0, 0}, {6.6, 14.0, 8.4}, {0, 0, 0}};
// [NVLINK, PCI, NET][algo][proto]
constexpr double kHwLat[3][3][3] = {
    {{.6, 1.25, 28}, {.6, 1.9, 3.4}, {0, 0, 23}},
    {{1.0, 1.9, 28}, {1.0, 2.5, 5.7}, {0, 0, 0}},
    {{5.0, 8.5, 28}, {2.7, 4.0, 14.0}, {0, 0, 18}},
};
// [Volta, Ampere, Hopper][1 node, 2 nodes, more]
constexpr double kLlMaxBw[3][3] = {{39.0, 39.0, 20.4}, {87.7, 22.5, 19.0}, {87.7, 22.5, 19.0}};
constexpr double kPerChMaxRingLL128Bw[3][3] = {{20, 20, 20}, {20, 20, 20}, {36.7, 36.7, 36.7}};
constexpr double kPerChMaxTreeLL128Bw[3][3] = {{20, 20, 20}, {20, 20, 20}, {36.7, 36.7, 29.0}};
constexpr double kPerChMaxTreeBw[3][3] = {{26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}};
// Tree bandwidth correction by log2(bytes / 64), 64 B .. 256 MB.
constexpr double kTreeCorrection[3][23] = {
    {1, 1, 1, 1, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1, 1, 1, 1},
    {1, 1, 1, 1, 1, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1, 1},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9},
};
constexpr double kNetOverheadUs = 1.0;  // getNetOverhead() on x86 Intel hosts

int Log2i(double value) {
  int log = 0;
  for (uint64_t v = static_cast<uint64_t>(value); v > 1; v >>= 1) ++log;
  return log;
}

bool SameName(std::string_view a, std::string_view b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
  });
}

// The fitted α/β for this collective, rank count and path (a fit without one: NCCL's own choice)
// whose size range holds `bytes`, else the nearest range; null when none was fitted.
const CollectiveFit* FindFit(const HardwareProfile& p, const std::string& name, int ranks, double bytes,
                             const CollectivePath& path) {
  const CollectiveFit* best = nullptr;
  double best_distance = std::numeric_limits<double>::infinity();
  for (const CollectiveFit& fit : p.collective_fits) {
    if (fit.collective != name || fit.ranks != ranks) continue;
    if (!SameName(fit.algorithm, path.algorithm) || !SameName(fit.protocol, path.protocol)) continue;
    const double distance = bytes < fit.min_bytes ? fit.min_bytes - bytes : bytes > fit.max_bytes ? bytes - fit.max_bytes : 0;
    if (distance < best_distance) {
      best = &fit;
      best_distance = distance;
    }
  }
  return best;
}

}  // namespace

Result<CollectiveEstimate> EstimateCollective(const HardwareProfile& p, Collective collective, int ranks,
                                              double bytes, const CollectivePath& only) {
  if (collective != Collective::kAllReduce && collective != Collective::kAllGather) {
    return InvalidArgument("the planner models all_reduce and all_gather only");
  }
  if (ranks < 1) return InvalidArgument("ranks must be at least 1");
  if (ranks == 1) return CollectiveEstimate{0, 0, 0, "none", ""};
  const std::string name = CollectiveName(collective);
  if (const CollectiveFit* fit = FindFit(p, name, ranks, bytes, only)) {
    const double transfer = bytes / (fit->beta_gb_s * 1e3);
    return CollectiveEstimate{fit->alpha_us + transfer, fit->alpha_us, fit->beta_gb_s, "fit", fit->protocol};
  }
  if (p.intra_node.hw == LinkHw::kMemory) {
    return FailedPrecondition(p.name + " has no fitted " + name + " at " + std::to_string(ranks) +
                              " ranks (CPU collectives come only from plan calibrate --bench-comm)");
  }
  const int nodes = (ranks + p.gpus_per_node - 1) / p.gpus_per_node;
  if (nodes > 1 && !p.inter_node) {
    return FailedPrecondition(std::to_string(ranks) + " ranks need " + std::to_string(nodes) + " nodes of " +
                              std::to_string(p.gpus_per_node) + " GPUs, and " + p.name +
                              " describes no network between nodes");
  }
  const int per_node = ranks / nodes;
  const bool all_reduce = collective == Collective::kAllReduce;
  const int generation = p.compute_capability >= 90 ? 2 : p.compute_capability >= 80 ? 1 : 0;
  const int column = nodes <= 2 ? nodes - 1 : 2;
  const int ll_row = nodes == 1 ? generation : 0;
  const int intra_hw = p.intra_node.hw == LinkHw::kNvlink ? 0 : 1;
  const double channels = p.intra_node.channels;
  // Ranks fill one socket's GPUs first; past them, every ring and chain crosses the inter-CPU link.
  const bool crosses_sockets = per_node > p.gpus_per_node / p.intra_node.sockets;
  double bw_intra = p.intra_node.links * p.intra_node.link_gb_s / channels;  // per channel
  if (crosses_sockets && p.intra_node.socket_link_gb_s > 0) {
    bw_intra = std::min(bw_intra, p.intra_node.socket_link_gb_s / channels);
  }
  const double socket_hop_us = crosses_sockets ? p.intra_node.socket_hop_us : 0;
  const double bw_inter = p.inter_node ? std::min(bw_intra, p.inter_node->bandwidth_gb_s / channels) : bw_intra;
  const double latency_inter = p.inter_node ? p.inter_node->latency_us : 0;
  const int steps = all_reduce ? 2 * (ranks - 1) : ranks - 1;
  const int inter_steps = all_reduce ? (nodes > 1 ? 2 * nodes : 0) : nodes - 1;
  // LL128 needs NVLink inside the node and a GPU generation NCCL tuned it for.
  const bool ll128 = p.intra_node.hw == LinkHw::kNvlink &&
                     (p.compute_capability == 70 || p.compute_capability == 80 || p.compute_capability == 90);

  CollectiveEstimate best{std::numeric_limits<double>::infinity(), 0, 0, "", ""};
  for (int algo : {kTree, kRing, kNvls}) {
    if (algo == kTree && !all_reduce) continue;  // NCCL's tree runs AllReduce only
    if (algo == kNvls && (!all_reduce || !p.intra_node.nvls || nodes > 1)) continue;
    if (!only.algorithm.empty() && !SameName(only.algorithm, kAlgoNames[algo])) continue;
    for (int proto : {kLL, kLL128, kSimple}) {
      if (proto == kLL128 && !ll128) continue;
      if (algo == kNvls && proto != kSimple) continue;
      if (!only.protocol.empty() && !SameName(only.protocol, kProtoNames[proto])) continue;
      const double algo_channels = algo == kNvls ? per_node : channels;
      const double bw = algo == kNvls ? std::min(bw_intra, bw_inter) : (nodes <= 2 ? bw_intra : bw_inter);
      double bus = algo_channels * bw;
      if (algo == kRing && proto == kLL) {
        bus = std::min(kLlMaxBw[ll_row][column], bus * (nodes > 1 || all_reduce ? 1.0 / 4 : 1.0 / 3));
      } else if (algo == kRing && proto == kLL128) {
        bus = std::min(bus * (per_node < 2 ? 0.7 : 0.92), channels * kPerChMaxRingLL128Bw[generation][column]);
      } else if (algo == kTree) {
        bus = std::min(bus * .92, channels * kPerChMaxTreeBw[generation][column]);
        if (proto == kLL) bus = std::min(bus / 3.8, kLlMaxBw[ll_row][column]);
        if (proto == kLL128) {
          bus = std::min(bus * (nodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0), channels * kPerChMaxTreeLL128Bw[generation][column]);
        }
      }
      double algbw = algo == kRing ? bus * ranks / steps : algo == kNvls ? bus * 5.0 / 6.0 : bus * 0.5;
      // A step of a ring or chain waits for its slowest hop: the one over the socket link.
      const double intra_lat = kHwLat[intra_hw][algo][proto] + (algo == kNvls ? 0 : socket_hop_us);
      const double inter_lat = kHwLat[2][algo][proto] + latency_inter + (proto == kSimple ? latency_inter : 0);
      double latency = kBaseLat[algo][proto];
      if (algo == kRing) {
        const double net_overhead = nodes > 1 ? kNetOverheadUs * (proto == kSimple ? 3 : 1) : 0;
        latency += (steps - inter_steps) * std::max(intra_lat, net_overhead) + inter_steps * inter_lat;
      } else if (algo == kTree) {
        latency += 2 * ((per_node - 1) * intra_lat + Log2i(nodes) * inter_lat);
      } else {
        latency = intra_lat;
      }
      const int log_size = Log2i(bytes / 64);
      if (algo == kTree && log_size < 23) algbw *= kTreeCorrection[proto][std::max(0, log_size)];
      if (algo == kRing && proto == kSimple && all_reduce && nodes > 1 && bytes / (channels * ranks) >= 64) {
        latency *= p.compute_capability < 80 ? 1.9 : 1.4;  // NCCL's "plateau effect"
      }
      const double time = latency + bytes / (algbw * 1e3);
      if (time < best.time_us) best = {time, latency, algbw, kAlgoNames[algo], kProtoNames[proto]};
    }
  }
  if (best.algorithm.empty()) {
    return NotFound("the " + p.name + " fabric has no " + name + " path " + (only.algorithm.empty() ? "*" : only.algorithm) +
                    "/" + (only.protocol.empty() ? "*" : only.protocol) + " at " + std::to_string(ranks) + " ranks");
  }
  return best;
}

double LinkPeakGbS(const HardwareProfile& p, int ranks) {
  if (p.intra_node.hw == LinkHw::kMemory) return 0;
  if (ranks > p.gpus_per_node) return p.inter_node ? p.inter_node->bandwidth_gb_s : 0;
  return p.intra_node.links * p.intra_node.link_gb_s;
}

}  // namespace tpserve::planner
