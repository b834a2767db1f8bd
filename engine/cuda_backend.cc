#include "engine/cuda_backend.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace tpserve {

namespace {

// The module's entry point `symbol`, after checking that the module was built with these headers.
// The probe already loaded the module: this dlopen finds it again. It is never unloaded (the
// decoders' code lives in it).
Result<void*> ModuleEntry(const std::string& module_path, const char* symbol) {
  void* module = dlopen(module_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (module == nullptr) return FailedPrecondition("cannot load " + module_path + ": " + dlerror());
  auto abi = reinterpret_cast<CudaModuleAbiFn>(dlsym(module, "tpserve_cuda_abi"));
  void* entry = dlsym(module, symbol);
  if (abi == nullptr || entry == nullptr) return FailedPrecondition(module_path + " has no CUDA decoder");
  if (abi() != kCudaModuleAbi) {
    return FailedPrecondition(module_path + " was built for module ABI " + std::to_string(abi()) + ", this tpserve is " +
                              std::to_string(kCudaModuleAbi) + " (rebuild the two together)");
  }
  return entry;
}

}  // namespace

Result<CudaGroup> CreateCudaGroup(const std::string& module_path, const CudaGroupRequest& request) {
  ASSIGN_OR_RETURN(void* entry, ModuleEntry(module_path, "tpserve_cuda_create_group"));
  Result<CudaGroup> reply = Internal("the CUDA module returned nothing");
  reinterpret_cast<CudaCreateGroupFn>(entry)(&request, &reply);
  return reply;
}

Result<std::string> MakeNcclUniqueId(const std::string& module_path) {
  ASSIGN_OR_RETURN(void* entry, ModuleEntry(module_path, "tpserve_cuda_nccl_unique_id"));
  Result<std::string> reply = Internal("the CUDA module returned nothing");
  reinterpret_cast<CudaNcclUniqueIdFn>(entry)(&reply);
  if (reply.ok() && reply->size() != kNcclUniqueIdBytes) {
    return Internal("ncclUniqueId of " + std::to_string(reply->size()) + " bytes, expected " +
                    std::to_string(kNcclUniqueIdBytes));
  }
  return reply;
}

Result<DeviceCommBenchReply> RunDeviceCommBench(const std::string& module_path, const DeviceCommBenchRequest& request) {
  ASSIGN_OR_RETURN(void* entry, ModuleEntry(module_path, "tpserve_cuda_comm_bench"));
  Result<DeviceCommBenchReply> reply = Internal("the CUDA module returned nothing");
  reinterpret_cast<CudaCommBenchFn>(entry)(&request, &reply);
  return reply;
}

Result<double> MeasureCudaReadBandwidth(const std::string& module_path, int device, size_t bytes) {
  ASSIGN_OR_RETURN(void* entry, ModuleEntry(module_path, "tpserve_cuda_read_bandwidth"));
  Result<double> reply = Internal("the CUDA module returned nothing");
  reinterpret_cast<CudaReadBandwidthFn>(entry)(device, bytes, &reply);
  return reply;
}

}  // namespace tpserve
