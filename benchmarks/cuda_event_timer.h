// Timing one GPU launch with CUDA events, for the device benchmarks (bench_cuda_gemm,
// bench_cuda_kernels).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <vector>

namespace tpserve::bench {

// Median µs of `launch` over `reps` calls after 5 warm-ups, each timed alone on the default stream.
inline double MedianEventUs(const std::function<void()>& launch, int reps) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<double> us;
  for (int r = 0; r < reps + 5; ++r) {
    cudaEventRecord(start);
    launch();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    if (r >= 5) us.push_back(ms * 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

}  // namespace tpserve::bench
