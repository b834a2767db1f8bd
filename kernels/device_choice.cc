#include "kernels/device_choice.h"

namespace tpserve {

const char* DeviceKindName(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kAuto: return "auto";
    case DeviceKind::kCpu: return "cpu";
    case DeviceKind::kCuda: return "cuda";
  }
  return "?";
}

std::optional<DeviceKind> ParseDeviceKind(std::string_view name) {
  for (DeviceKind kind : {DeviceKind::kAuto, DeviceKind::kCpu, DeviceKind::kCuda}) {
    if (name == DeviceKindName(kind)) return kind;
  }
  return std::nullopt;
}

Result<DeviceChoice> ChooseDevice(DeviceKind requested, const Result<CudaProbe>& probe) {
  if (requested == DeviceKind::kCpu) return DeviceChoice{DeviceKind::kCpu, ""};
  std::string unavailable;
  if (!probe.ok()) {
    unavailable = probe.status().message();
  } else if (!probe->has_decoder) {
    unavailable = probe->module_path + " found " + std::to_string(probe->device_count) +
                  " GPU(s) but has no CUDA decoder yet";
  } else {
    return DeviceChoice{DeviceKind::kCuda, "using the CUDA backend (" + std::to_string(probe->device_count) +
                                               " GPU(s), " + probe->module_path + ")"};
  }
  if (requested == DeviceKind::kAuto) {
    return DeviceChoice{DeviceKind::kCpu, "CUDA backend unavailable (" + unavailable + "); using the CPU backend"};
  }
  return FailedPrecondition("--device cuda: " + unavailable + " (--device auto falls back to the CPU)");
}

}  // namespace tpserve
