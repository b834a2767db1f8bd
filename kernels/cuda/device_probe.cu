// Entry point of the CUDA backend module (libtpserve_cuda.so), loaded at run time with dlopen so
// that the tpserve binary starts on machines without a CUDA driver. cudart is linked statically
// and loads the driver lazily, so even this module loads where no driver exists; the probe then
// reports why no device can be used.
#include <cuda_runtime.h>

#include <cstdio>

extern "C" {

// Writes a one-line description per device (or the reason there is none) into `report`.
// Returns the number of usable devices, or -1 when the runtime cannot reach any.
__attribute__((visibility("default"))) int tpserve_cuda_probe(char* report, int capacity) {
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    std::snprintf(report, capacity, "CUDA runtime: %s (%s)", cudaGetErrorName(error),
                  cudaGetErrorString(error));
    return -1;
  }
  int written = 0;
  for (int device = 0; device < count && written < capacity; ++device) {
    cudaDeviceProp props{};
    cudaGetDeviceProperties(&props, device);
    written += std::snprintf(report + written, capacity - written,
                             "cuda:%d %s, sm_%d%d, %.1f GiB, %d SMs\n", device, props.name,
                             props.major, props.minor, props.totalGlobalMem / 1073741824.0,
                             props.multiProcessorCount);
  }
  // Which pairs can read each other's memory directly (the one-shot AllReduce needs it), and
  // CUDA's relative performance rank of the link (lower is faster: NVLink ranks above PCIe).
  for (int a = 0; a < count && written < capacity; ++a) {
    for (int b = a + 1; b < count && written < capacity; ++b) {
      int access = 0, rank = 0;
      cudaDeviceCanAccessPeer(&access, a, b);
      cudaDeviceGetP2PAttribute(&rank, cudaDevP2PAttrPerformanceRank, a, b);
      written += std::snprintf(report + written, capacity - written, "peer cuda:%d <-> cuda:%d: %s (performance rank %d)\n",
                               a, b, access ? "direct access" : "no direct access", rank);
    }
  }
  return count;
}

}  // extern "C"
