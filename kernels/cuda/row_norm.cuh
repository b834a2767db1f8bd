// The row reductions of the norms, shared by kernels/cuda/ops.cu (RmsNorm, AddRmsNorm) and the
// one-shot AllReduce's fused residual add + norm (comm/cuda/oneshot_communicator.cu), so that the
// fused and the separate paths produce the same bits. Device code: include from .cu files only.
#pragma once

namespace tpserve::cuda {

inline constexpr int kNormThreads =
    256;  // one block per row; the reduction tree depends on this alone

// Sum of squares of one row in a fixed order: each thread strides over the row, then a fixed
// shared-memory tree. Double accumulation, like the CPU. Call with kNormThreads threads.
__device__ inline double RowSumOfSquares(const float* row, int n) {
  __shared__ double partial[kNormThreads];
  double sum = 0;
  for (int i = threadIdx.x; i < n; i += kNormThreads) sum += static_cast<double>(row[i]) * row[i];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int width = kNormThreads / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) partial[threadIdx.x] += partial[threadIdx.x + width];
    __syncthreads();
  }
  const double total = partial[0];
  __syncthreads();  // `partial` may be reused by the caller's next row
  return total;
}

// y = row / sqrt(mean(row²) + eps) * weight for one row of `n` (after RowSumOfSquares).
__device__ inline void ScaleRow(const float* row, const float* weight, float* y, int n,
                                double sum_of_squares, float eps) {
  const float scale = static_cast<float>(1.0 / sqrt(sum_of_squares / n + eps));
  for (int i = threadIdx.x; i < n; i += kNormThreads) y[i] = row[i] * scale * weight[i];
}

}  // namespace tpserve::cuda
