#include <cuda_runtime.h>

#include <climits>
#include <string>

#include "kernels/cuda/sampling.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/preload.cuh"

namespace tpserve::cuda {
namespace {

constexpr int kThreads = 512;

struct Candidate {
  float value;
  int id;  // INT_MAX: none yet
};

// Whether a beats b: a number beats NaN, the larger value wins, then the lower id.
__device__ bool Beats(const Candidate& a, const Candidate& b) {
  if (a.id == INT_MAX) return false;
  if (b.id == INT_MAX) return true;
  const bool a_nan = isnan(a.value), b_nan = isnan(b.value);
  if (a_nan != b_nan) return b_nan;
  if (!a_nan && a.value != b.value) return a.value > b.value;
  return a.id < b.id;
}

__global__ void GreedyKernel(GreedyArgs a) {
  const int row = blockIdx.x;
  const int32_t* banned = a.banned_ids + a.banned_offsets[row];
  const int banned_count = a.banned_offsets[row + 1] - a.banned_offsets[row];
  Candidate best{0.0f, INT_MAX};
  for (int id = threadIdx.x; id < a.vocab_size; id += kThreads) {
    bool skip = false;
    for (int b = 0; b < banned_count; ++b) skip |= banned[b] == id;
    if (skip) continue;
    const int chunk = id / a.vocab_local;
    const float value = a.logits[(static_cast<size_t>(chunk) * a.rows + row) * a.vocab_local + id % a.vocab_local];
    const Candidate c{value, id};
    if (Beats(c, best)) best = c;
  }
  __shared__ Candidate shared[kThreads];
  shared[threadIdx.x] = best;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (threadIdx.x < width && Beats(shared[threadIdx.x + width], shared[threadIdx.x])) {
      shared[threadIdx.x] = shared[threadIdx.x + width];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) a.out[row] = shared[0].id == INT_MAX ? -1 : shared[0].id;
}

}  // namespace

Status GreedySample(const GreedyArgs& args, void* stream) {
  if (args.rows == 0) return Status::Ok();
  if (args.vocab_local < 1 || args.vocab_size > args.tp * args.vocab_local) {
    return InvalidArgument("GreedySample: vocabulary " + std::to_string(args.vocab_size) + " does not fit " +
                           std::to_string(args.tp) + " slices of " + std::to_string(args.vocab_local));
  }
  GreedyKernel<<<args.rows, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(args);
  return LaunchStatus("GreedySample");
}

Status PreloadSamplingKernels() { return PreloadKernels("greedy sampling", GreedyKernel); }

}  // namespace tpserve::cuda
