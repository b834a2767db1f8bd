// The host side of the CUDA backend: the calls into the CUDA module through dlopen, with the
// structs of engine/cuda/module_api.h. No CUDA headers: the module (engine/cuda/) implements
// tpserve_cuda_create_group and the others; this binary never links CUDA.
#pragma once

#include <cstddef>
#include <string>
#include "common/status.h"
#include "engine/cuda/module_api.h"
#include "engine/cuda/placement.h"

namespace tpserve {

// Loads the module at `module_path` and asks it for the group.
Result<CudaGroup> CreateCudaGroup(const std::string& module_path, const CudaGroupRequest& request);

// A fresh ncclUniqueId (ncclGetUniqueId, which needs no GPU), kNcclUniqueIdBytes: the leader of a
// multi-process group makes it and the rendezvous hands it to every member.
Result<std::string> MakeNcclUniqueId(const std::string& module_path);

// The read bandwidth of GPU `device` in 1e9 bytes/s (cuda::MeasureReadBandwidth over `bytes`):
// the weight-streaming floor of bench-decode --device cuda.
Result<double> MeasureCudaReadBandwidth(const std::string& module_path, int device, size_t bytes);

// One bench-comm sweep on the GPUs (DeviceCommBenchRequest).
Result<DeviceCommBenchReply> RunDeviceCommBench(const std::string& module_path, const DeviceCommBenchRequest& request);

}  // namespace tpserve
