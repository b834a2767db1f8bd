// CUDA runtime errors as Status, for every CUDA source of the backend (kernels, communicators,
// the decoder's buffers). Includes cuda_runtime.h: for .cu files and the module's own sources.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "common/status.h"

namespace tpserve::cuda {

// `what` and the error's name and text; out of memory is RESOURCE_EXHAUSTED, the rest INTERNAL.
inline Status CudaStatus(cudaError_t error, const std::string& what) {
  if (error == cudaSuccess) return Status::Ok();
  const StatusCode code = error == cudaErrorMemoryAllocation ? StatusCode::kResourceExhausted : StatusCode::kInternal;
  return Status(code, what + ": " + cudaGetErrorName(error) + " (" + cudaGetErrorString(error) + ")");
}

// Whether the last kernel launch on this thread failed.
inline Status LaunchStatus(const std::string& kernel) { return CudaStatus(cudaGetLastError(), kernel); }

}  // namespace tpserve::cuda
