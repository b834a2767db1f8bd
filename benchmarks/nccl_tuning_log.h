// What NCCL's tuner chose, read from its debug output (NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING):
// rank 0 of each communicator prints one line per collective it plans (src/enqueue.cc; a CUDA
// graph replay plans nothing, so captured calls print once, at capture). NCCL 2.20 and later:
//   "<host>:<pid>:<tid> [0] NCCL INFO AllReduce: 4096 Bytes -> Algo TREE proto LL
//    channel{Lo..Hi}={0..1}"
// earlier, by NCCL's indices:
//   "... NCCL INFO AllReduce: 37756928 Bytes -> Algo 1 proto 2 time 2860.208008"
// and a collective that runs on the symmetric-memory kernels (registered windows, NCCL 2.27+;
// src/scheduler/symmetric_sched.cc in 2.28):
//   "... NCCL INFO AllReduce [Symmetric]: 4096 Bytes -> Kernel <name> nchannels 8 nthreads 512
//    nWorks 1"
// (each on one line). bench-comm's sweeps use it to report which path NCCL picked by itself at
// each size, and whether --register's symmetric kernels ran instead of assuming it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tpserve {

struct NcclTuningChoice {
  std::string collective;  // "AllReduce", "AllGather", ... ("" when the line does not name it)
  size_t bytes = 0;
  // Ring, Tree, NVLS, NVLSTree, CollNetDirect, CollNetChain, PAT, or as printed
  std::string algorithm;
  std::string protocol;    // LL, LL128, Simple, or as printed
  bool symmetric = false;  // ran on the symmetric-memory kernels
  int calls = 1;           // lines that made this choice (CountChoices)
};

// Every tuning line of `log`, in order; other lines are skipped.
std::vector<NcclTuningChoice> ParseNcclTuningLog(std::string_view log);

// The distinct choices of `lines`, each with the number of lines that made it, in first-seen order.
std::vector<NcclTuningChoice> CountChoices(const std::vector<NcclTuningChoice>& lines);

// The choice NCCL made in most calls for `collective` at `bytes` (ties: the last seen); nullptr
// when the log has none for that size.
const NcclTuningChoice* ChoiceAt(const std::vector<NcclTuningChoice>& choices,
                                 std::string_view collective, size_t bytes);

// NCCL_ALGO / NCCL_PROTO spellings as NCCL's tuning lines print them: "ring" -> "Ring",
// "ll128" -> "LL128", "nvls" -> "NVLS"; unknown names come back unchanged.
std::string CanonicalNcclAlgorithm(std::string_view name);
std::string CanonicalNcclProtocol(std::string_view name);

}  // namespace tpserve
