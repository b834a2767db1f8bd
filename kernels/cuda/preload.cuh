// Loading kernels before the first step. CUDA loads each kernel lazily, at its first launch, by
// default (CUDA_MODULE_LOADING=LAZY since 12.2), and a load may synchronise the context: on ranks
// that share a GPU, one rank's first launch of a kernel can then wait for a peer's one-shot kernel
// that spins until this rank's kernel runs — a deadlock until the collective timeout. So every
// kernel the decoder launches is loaded at start-up, before any collective, by asking for its
// attributes (which loads it). For .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "common/status.h"

namespace tpserve::cuda {

template <typename... Kernels>
Status PreloadKernels(const std::string& what, Kernels... kernels) {
  cudaFuncAttributes attributes{};
  for (const void* kernel : {reinterpret_cast<const void*>(kernels)...}) {
    const cudaError_t loaded = cudaFuncGetAttributes(&attributes, kernel);
    if (loaded != cudaSuccess) {
      return Internal("loading the " + what + " kernels: " + cudaGetErrorName(loaded) + " (" +
                      cudaGetErrorString(loaded) + ")");
    }
  }
  return Status::Ok();
}

}  // namespace tpserve::cuda
