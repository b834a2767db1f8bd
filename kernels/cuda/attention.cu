#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/preload.cuh"

namespace tpserve::cuda {
namespace {

constexpr int kThreads = 128;  // the reduction trees depend on this alone

__device__ int Partitions(int context) { return (context + kAttentionPartition - 1) / kAttentionPartition; }

// Block-wide reduction in a fixed order: each thread's strided values in order, then a tree.
template <bool kMax>
__device__ float BlockReduce(const float* values, int n, float* shared) {
  float acc = kMax ? -INFINITY : 0.0f;
  for (int i = threadIdx.x; i < n; i += kThreads) acc = kMax ? fmaxf(acc, values[i]) : acc + values[i];
  shared[threadIdx.x] = acc;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) {
      shared[threadIdx.x] = kMax ? fmaxf(shared[threadIdx.x], shared[threadIdx.x + width])
                                 : shared[threadIdx.x] + shared[threadIdx.x + width];
    }
    __syncthreads();
  }
  const float result = shared[0];
  __syncthreads();
  return result;
}

// One block per (token, head, partition): scores, softmax numerators and the weighted value sum of
// the partition's positions. Writes [max, sum, acc[head_dim]] unnormalized.
__global__ void PartitionKernel(PagedAttentionArgs a, int partitions) {
  const int token = blockIdx.x, head = blockIdx.y, part = blockIdx.z;
  const int context = a.positions[token] + 1;
  const int begin = part * kAttentionPartition;
  if (begin >= context) return;
  const int end = min(context, begin + kAttentionPartition);
  const int count = end - begin;
  const int kv_head = head / (a.heads / a.kv_heads);
  const int32_t* table = a.block_tables + static_cast<size_t>(a.token_sequence[token]) * a.block_table_width;

  extern __shared__ float shared[];  // q[head_dim] | scores[partition] | slots[partition] | reduce[kThreads]
  float* q = shared;
  float* scores = q + a.head_dim;
  int* slots = reinterpret_cast<int*>(scores + kAttentionPartition);
  float* reduce = reinterpret_cast<float*>(slots + kAttentionPartition);

  const float* q_row = a.q + static_cast<size_t>(token) * a.q_stride + static_cast<size_t>(head) * a.head_dim;
  for (int d = threadIdx.x; d < a.head_dim; d += kThreads) q[d] = q_row[d];
  for (int i = threadIdx.x; i < count; i += kThreads) {
    const int position = begin + i;
    slots[i] = table[position / a.block_size] * a.block_size + position % a.block_size;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < count; i += kThreads) {
    const float* k = a.key_cache + (static_cast<size_t>(slots[i]) * a.kv_heads + kv_head) * a.head_dim;
    float dot = 0;
    for (int d = 0; d < a.head_dim; ++d) dot += q[d] * k[d];
    scores[i] = dot * a.scale;
  }
  __syncthreads();
  const float max_score = BlockReduce<true>(scores, count, reduce);
  for (int i = threadIdx.x; i < count; i += kThreads) scores[i] = expf(scores[i] - max_score);
  __syncthreads();
  const float sum = BlockReduce<false>(scores, count, reduce);

  float* partial = a.scratch + ((static_cast<size_t>(token) * a.heads + head) * partitions + part) * (a.head_dim + 2);
  if (threadIdx.x == 0) {
    partial[0] = max_score;
    partial[1] = sum;
  }
  for (int d = threadIdx.x; d < a.head_dim; d += kThreads) {
    float acc = 0;
    for (int i = 0; i < count; ++i) {
      acc += scores[i] * a.value_cache[(static_cast<size_t>(slots[i]) * a.kv_heads + kv_head) * a.head_dim + d];
    }
    partial[2 + d] = acc;
  }
}

// One block per (token, head): the partitions in order, rescaled to the largest max.
__global__ void CombineKernel(PagedAttentionArgs a, int partitions) {
  const int token = blockIdx.x, head = blockIdx.y;
  const int used = Partitions(a.positions[token] + 1);
  const float* base = a.scratch + (static_cast<size_t>(token) * a.heads + head) * partitions * (a.head_dim + 2);
  float max_score = -INFINITY;
  for (int p = 0; p < used; ++p) max_score = fmaxf(max_score, base[p * (a.head_dim + 2)]);
  float total = 0;
  for (int p = 0; p < used; ++p) {
    const float* partial = base + p * (a.head_dim + 2);
    total += partial[1] * expf(partial[0] - max_score);
  }
  float* out = a.out + static_cast<size_t>(token) * a.heads * a.head_dim + static_cast<size_t>(head) * a.head_dim;
  for (int d = threadIdx.x; d < a.head_dim; d += blockDim.x) {
    float acc = 0;
    for (int p = 0; p < used; ++p) {
      const float* partial = base + p * (a.head_dim + 2);
      acc += partial[2 + d] * expf(partial[0] - max_score);
    }
    out[d] = acc / total;
  }
}

}  // namespace

Status PagedAttention(const PagedAttentionArgs& args, void* stream) {
  if (args.tokens == 0) return Status::Ok();
  if (args.kv_heads < 1 || args.heads % args.kv_heads != 0) {
    return InvalidArgument("PagedAttention: " + std::to_string(args.heads) + " heads do not group over " +
                           std::to_string(args.kv_heads) + " KV heads");
  }
  const int chunk = PagedAttentionChunkTokens(args.scratch_floats, args.heads, args.head_dim, args.max_context);
  if (chunk < 1) {
    return InvalidArgument("PagedAttention: " + std::to_string(args.scratch_floats) +
                           " floats of scratch hold no token at context " + std::to_string(args.max_context));
  }
  const int partitions = AttentionPartitions(args.max_context);
  const size_t shared = (args.head_dim + kAttentionPartition) * sizeof(float) + kAttentionPartition * sizeof(int) +
                        kThreads * sizeof(float);
  auto s = static_cast<cudaStream_t>(stream);
  const size_t q_width = static_cast<size_t>(args.heads) * args.head_dim;
  for (int begin = 0; begin < args.tokens; begin += chunk) {
    PagedAttentionArgs part = args;  // tokens [begin, begin + part.tokens)
    part.tokens = std::min(chunk, args.tokens - begin);
    part.q = args.q + static_cast<size_t>(begin) * args.q_stride;
    part.out = args.out + static_cast<size_t>(begin) * q_width;
    part.token_sequence = args.token_sequence + begin;
    part.positions = args.positions + begin;
    PartitionKernel<<<dim3(part.tokens, part.heads, partitions), kThreads, shared, s>>>(part, partitions);
    CombineKernel<<<dim3(part.tokens, part.heads), kThreads, 0, s>>>(part, partitions);
  }
  return LaunchStatus("PagedAttention");
}

Status PreloadAttentionKernels() { return PreloadKernels("attention", PartitionKernel, CombineKernel); }

}  // namespace tpserve::cuda
