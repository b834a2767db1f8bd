// `--device auto|cpu|cuda`: which backend runs the ranks. `auto` takes CUDA when the module, a
// driver, a GPU and the module's decoder are all there, and otherwise the CPU, with one log line
// that says why; `cuda` is CUDA or a clear error; `cpu` never probes.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "kernels/cuda_module.h"

namespace tpserve {

enum class DeviceKind { kAuto, kCpu, kCuda };

const char* DeviceKindName(DeviceKind kind);
std::optional<DeviceKind> ParseDeviceKind(std::string_view name);

struct DeviceChoice {
  DeviceKind kind = DeviceKind::kCpu;  // never kAuto
  std::string note;  // why auto fell back to the CPU, or which module runs CUDA (empty for --device cpu)
};

// `probe`: what ProbeCudaBackend found (passed in, so the policy is testable without a GPU).
Result<DeviceChoice> ChooseDevice(DeviceKind requested, const Result<CudaProbe>& probe);

}  // namespace tpserve
