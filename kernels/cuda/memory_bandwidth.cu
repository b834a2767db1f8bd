#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/memory_bandwidth.h"

namespace tpserve::cuda {
namespace {

// Every 16-byte word once (grid-stride); the XOR of what a thread read is stored only when it is
// a value no fill produces, so the loads cannot be optimised away and nothing is written.
__global__ void ReadKernel(const uint4* data, size_t words, unsigned* sink) {
  unsigned acc = 0;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < words;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcs(data + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}

}  // namespace

// Frees the buffers and events however the measurement ends.
struct Resources {
  void* data = nullptr;
  unsigned* sink = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  ~Resources() {
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
    cudaFree(sink);
    cudaFree(data);
  }
};

Result<double> MeasureReadBandwidth(size_t bytes, int repeats) {
  const size_t words = bytes / sizeof(uint4);
  if (words == 0 || repeats < 1) return InvalidArgument("MeasureReadBandwidth: nothing to read");
  Resources r;
  RETURN_IF_ERROR(CudaStatus(cudaMalloc(&r.data, words * sizeof(uint4)), "cudaMalloc (bandwidth buffer)"));
  RETURN_IF_ERROR(CudaStatus(cudaMalloc(&r.sink, sizeof(unsigned)), "cudaMalloc"));
  RETURN_IF_ERROR(CudaStatus(cudaMemset(r.data, 0x5a, words * sizeof(uint4)), "cudaMemset"));
  RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&r.start), "cudaEventCreate"));
  RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&r.stop), "cudaEventCreate"));
  int device = 0, sms = 0;
  RETURN_IF_ERROR(CudaStatus(cudaGetDevice(&device), "cudaGetDevice"));
  RETURN_IF_ERROR(CudaStatus(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "SM count"));
  std::vector<double> gb_per_s;
  for (int run = 0; run <= repeats; ++run) {  // run 0 warms up
    RETURN_IF_ERROR(CudaStatus(cudaEventRecord(r.start), "cudaEventRecord"));
    ReadKernel<<<sms * 8, 512>>>(static_cast<const uint4*>(r.data), words, r.sink);
    RETURN_IF_ERROR(CudaStatus(cudaEventRecord(r.stop), "cudaEventRecord"));
    RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(r.stop), "read kernel"));
    float ms = 0;
    RETURN_IF_ERROR(CudaStatus(cudaEventElapsedTime(&ms, r.start, r.stop), "cudaEventElapsedTime"));
    if (run > 0) gb_per_s.push_back(static_cast<double>(words * sizeof(uint4)) / (ms * 1e6));
  }
  std::sort(gb_per_s.begin(), gb_per_s.end());
  return gb_per_s[gb_per_s.size() / 2];
}

}  // namespace tpserve::cuda
