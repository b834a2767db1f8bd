#include "engine/cuda/placement.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>

namespace tpserve {

Result<std::vector<int>> AssignDevices(int ranks, int visible_gpus, bool share_gpu, int first_device) {
  if (ranks < 1) return InvalidArgument("--tp must be at least 1, got " + std::to_string(ranks));
  if (visible_gpus < 1) return FailedPrecondition("no visible GPU (check CUDA_VISIBLE_DEVICES)");
  if (share_gpu) return std::vector<int>(ranks, 0);
  if (first_device < 0 || first_device + ranks > visible_gpus) {
    const std::string first = first_device > 0 ? " from GPU " + std::to_string(first_device) + " (LOCAL_RANK)" : "";
    return FailedPrecondition(std::to_string(ranks) + " rank(s) in this process need " + std::to_string(ranks) +
                              " GPUs" + first + ", " + std::to_string(visible_gpus) +
                              " visible (CUDA_VISIBLE_DEVICES); --share-gpu places every rank on one GPU for testing");
  }
  std::vector<int> devices(ranks);
  for (int r = 0; r < ranks; ++r) devices[r] = first_device + r;
  return devices;
}

Result<int> KvBlocksForMemory(const std::vector<GpuMemory>& gpus, double utilization, size_t block_bytes_per_rank) {
  if (!(utilization > 0 && utilization <= 1)) {
    return InvalidArgument("--gpu-memory-utilization must be in (0, 1], got " + std::to_string(utilization));
  }
  if (gpus.empty() || block_bytes_per_rank == 0) return InvalidArgument("no GPU or an empty KV block");
  int64_t blocks = std::numeric_limits<int32_t>::max();
  for (const GpuMemory& gpu : gpus) {
    const double used = static_cast<double>(gpu.total_bytes) - static_cast<double>(gpu.free_bytes);
    const double budget = utilization * static_cast<double>(gpu.total_bytes) - used;
    const double per_block = static_cast<double>(block_bytes_per_rank) * gpu.ranks;
    const int64_t fit = budget > 0 ? static_cast<int64_t>(std::floor(budget / per_block)) : 0;
    if (fit < 1) {
      constexpr double kMiB = 1 << 20;
      char line[320];
      std::snprintf(line, sizeof(line),
                    "cuda:%d: --gpu-memory-utilization %.2f allows %.0f MiB of %.0f MiB and %.0f MiB are in use "
                    "(weights and buffers), so no KV block of %.2f MiB fits; raise the utilization, lower --tp's "
                    "ranks per GPU, or load fewer layers",
                    gpu.device, utilization, utilization * gpu.total_bytes / kMiB, gpu.total_bytes / kMiB, used / kMiB,
                    per_block / kMiB);
      return Status(StatusCode::kResourceExhausted, line);
    }
    blocks = std::min(blocks, fit);
  }
  return static_cast<int>(blocks);
}

}  // namespace tpserve
