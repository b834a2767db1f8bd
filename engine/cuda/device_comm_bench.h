// The module side of `bench-comm --backend nccl|rank-order` (engine/cuda_backend.h's
// DeviceCommBenchRequest): one host thread and one stream per rank, CUDA events around the timed
// calls, results checked against the same exact small-integer sums as the local backend.
// Module-internal.
#pragma once

#include "engine/cuda/module_api.h"

namespace tpserve::cuda {

Result<DeviceCommBenchReply> RunDeviceCommBench(const DeviceCommBenchRequest& request);

}  // namespace tpserve::cuda
