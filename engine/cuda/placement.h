// Where the CUDA module puts its ranks and how much KV cache fits: plain policies over numbers the
// module measures, with no CUDA, so the host's tests check them on any machine.
#pragma once

#include <cstddef>
#include <vector>

#include "common/status.h"

namespace tpserve {

// The GPU of each of this process's `ranks` ranks: visible GPUs first_device, first_device + 1, ...
// (one per rank), or all on GPU 0 with share_gpu.
Result<std::vector<int>> AssignDevices(int ranks, int visible_gpus, bool share_gpu, int first_device = 0);

struct GpuMemory {
  int device = 0;
  size_t total_bytes = 0;
  size_t free_bytes = 0;  // after this GPU's ranks loaded their weights
  int ranks = 1;          // ranks placed on this GPU
};

// KV blocks per rank when each GPU may fill `utilization` of its memory (vLLM's
// --gpu-memory-utilization): the smallest over the GPUs of (utilization × total − used) /
// (ranks × block bytes). An error names the GPU and the numbers when not even one block fits.
Result<int> KvBlocksForMemory(const std::vector<GpuMemory>& gpus, double utilization, size_t block_bytes_per_rank);

}  // namespace tpserve
