// What the planner knows about a machine: one device (memory, bandwidth, dense rates), the
// fabric between devices (NCCL's view: link kind, links, per-link bandwidth, channels; a network
// between nodes), per-step overheads, achieved-to-peak efficiencies, and optionally collective
// timings fitted from measurements. Profiles are data files (planner/profiles/*.json, compiled in;
// or a file `plan calibrate` wrote), each citing where its numbers come from.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/status.h"

namespace tpserve::planner {

enum class LinkHw { kNvlink, kPci, kNet, kMemory };  // kMemory: CPU ranks sharing one memory

struct IntraNodeFabric {
  LinkHw hw = LinkHw::kNvlink;
  int links = 1;           // NVLink links per GPU (PCIe: 1)
  double link_gb_s = 0;    // NCCL's per-link bandwidth (GB/s, one direction)
  int channels = 1;        // NCCL channels (ring and tree)
  bool nvls = false;       // NVLink SHARP (NVSwitch with multicast, Hopper and later)
  // Two-socket hosts: the node's GPUs split evenly over `sockets` CPUs. A collective whose ranks
  // span sockets runs its rings and chains over the inter-CPU link: each step waits for that hop.
  int sockets = 1;
  double socket_link_gb_s = 0;  // the inter-CPU link NCCL assumes (topo.h AMD_BW 16); 0: not limiting
  double socket_hop_us = 0;     // added to every step's hop latency once ranks span sockets
};

struct InterNodeFabric {
  double bandwidth_gb_s = 0;  // per GPU
  double latency_us = 0;      // added to NCCL's network hop latency
};

// α + bytes / β for messages in [min_bytes, max_bytes], fitted from bench-comm or nccl-tests.
struct CollectiveFit {
  std::string collective = "all_reduce";  // all_reduce | all_gather
  int ranks = 2;
  double min_bytes = 0, max_bytes = 0;
  double alpha_us = 0;
  double beta_gb_s = 0;  // algorithm bandwidth: bytes / (time - alpha)
  std::string source;
  // The path it was measured on (NCCL_ALGO / NCCL_PROTO of a bench-comm --protocols sweep); empty:
  // NCCL's own choice, the fit the planner uses unless asked for one path.
  std::string algorithm;
  std::string protocol;
};

struct HardwareProfile {
  std::string name;
  std::string description;
  std::string device_kind = "gpu";  // gpu | cpu
  int compute_capability = 90;      // GPUs: selects NCCL's tuning rows (>= 90 Hopper, >= 80 Ampere)
  double memory_gb = 0;
  double memory_bandwidth_gb_s = 0;  // peak (datasheet) or measured (calibrated)
  double bf16_tflops = 0;
  double fp8_tflops = 0;             // 0: no FP8
  double memory_efficiency = 1.0;    // achieved / memory_bandwidth_gb_s in weight streaming
  double compute_efficiency = 1.0;   // achieved / peak in GEMMs
  double attention_efficiency = 1.0; // achieved / memory_bandwidth_gb_s reading the KV cache
  // GEMMs reach half their rate (bf16_tflops × compute_efficiency) at this many rows, and approach
  // it as rows grow: rate(M) = rate × M / (M + compute_half_rows), the shape of a per-GEMM cost
  // proportional to the weights (unpacking, tile quantization) amortized over the rows. 0: one rate
  // at every row count. plan calibrate fits it from decode batches and prefill steps.
  double compute_half_rows = 0;
  // Attention's FLOP rate (QKᵀ and PV) as a fraction of bf16_tflops; 0: compute_efficiency.
  double attention_compute_efficiency = 0;
  // Queries of one sequence that share one read of its KV cache in attention (FlashAttention's
  // query tile on GPUs; 1: every query reads every position it attends to, as the CPU backend's
  // kernel does). Prefill chunks read their KV once per tile; decode rows once each.
  int attention_query_tile = 1;
  double kernel_launch_us = 0;       // per kernel, exposed when the GPU work is shorter
  int kernels_per_layer = 0;
  double step_host_us = 0;           // per decode step: scheduling, sampling, copies
  // Per decoder layer, outside the modelled ops and not shrunk by TP: the small kernels (norms,
  // RoPE, SiLU, residual adds, KV writes) and the gaps between kernels. 0 in presets (no datasheet
  // gives it); plan calibrate --engine-steps fits it.
  double layer_us = 0;
  // Host time to issue one decoder layer, its launches included, for an engine that launches its
  // kernels one by one from its host loop (no CUDA graphs: `plan --engine-mode eager`). The GPU
  // waits for it whenever the layer's own work is shorter: a step takes at least layers × this.
  // 0: the launches alone (kernel_launch_us), which hide behind the GPU's work (CUDA graphs, or a
  // C++ runtime).
  double layer_host_us = 0;
  // CPU ranks are threads of one process on one memory: they share its bandwidth (a GPU's TP
  // ranks each have their own).
  bool shared_memory_bandwidth = false;
  // A GPU overlaps a GEMM's weight streaming with its math (time = the larger); the CPU backend's
  // kernels largely do one after the other (time = the sum).
  bool compute_overlaps_memory = true;
  int gpus_per_node = 8;
  IntraNodeFabric intra_node;
  std::optional<InterNodeFabric> inter_node;  // absent: TP cannot span nodes
  std::vector<CollectiveFit> collective_fits;
  std::map<std::string, std::string> sources;  // what each group of numbers comes from
  // Which engine calibration the numbers carry (ApplyEngineCalibration; reports print it). Not a
  // field of profile files.
  std::string calibration;
};

// Field errors name `source` and the field, e.g. "h100-sxm.json: fabric.intra_node.links: ...".
Result<HardwareProfile> ParseHardwareProfile(const nlohmann::json& json, const std::string& source);
nlohmann::json HardwareProfileJson(const HardwareProfile& profile);

// A preset's name (planner/profiles/NAME.json, compiled in) or a profile file's path.
Result<HardwareProfile> LoadHardwareProfile(const std::string& name_or_path);
std::vector<std::string> HardwareProfileNames();

}  // namespace tpserve::planner
