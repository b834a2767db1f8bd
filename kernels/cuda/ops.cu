#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/ops.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/preload.cuh"
#include "kernels/cuda/row_norm.cuh"

namespace tpserve::cuda {
namespace {

cudaStream_t AsStream(void* stream) { return static_cast<cudaStream_t>(stream); }

__global__ void RmsNormKernel(const float* x, const float* weight, float* y, int n, float eps) {
  const size_t offset = static_cast<size_t>(blockIdx.x) * n;
  ScaleRow(x + offset, weight, y + offset, n, RowSumOfSquares(x + offset, n), eps);
}

__global__ void AddRmsNormKernel(float* residual, const float* delta, const float* weight, float* y, int n,
                                 float eps) {
  const size_t offset = static_cast<size_t>(blockIdx.x) * n;
  float* row = residual + offset;
  for (int i = threadIdx.x; i < n; i += kNormThreads) row[i] += delta[offset + i];
  __syncthreads();
  ScaleRow(row, weight, y + offset, n, RowSumOfSquares(row, n), eps);
}

__global__ void SiluMulKernel(const float* gate, const float* up, float* out, size_t n) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = gate[i];
  out[i] = g / (1.0f + expf(-g)) * up[i];
}

// One thread per (token, head, pair i): element i pairs with element i + head_dim / 2.
__global__ void RopeKernel(float* x, int row_stride, int offset, const int32_t* positions, const double* inv_freq,
                           int head_dim) {
  const int half = head_dim / 2;
  const int pair = threadIdx.x;
  const int head = blockIdx.y;
  const int token = blockIdx.x;
  if (pair >= half) return;
  double s, c;
  sincos(static_cast<double>(positions[token]) * inv_freq[pair], &s, &c);
  const float cos_angle = static_cast<float>(c), sin_angle = static_cast<float>(s);
  float* h = x + static_cast<size_t>(token) * row_stride + offset + static_cast<size_t>(head) * head_dim;
  const float a = h[pair], b = h[pair + half];
  h[pair] = a * cos_angle - b * sin_angle;
  h[pair + half] = b * cos_angle + a * sin_angle;
}

__global__ void EmbeddingGatherKernel(const uint16_t* table, const int32_t* ids, float* out, int hidden,
                                      int vocab_begin, int vocab_rows) {
  const int token = blockIdx.x;
  const int local = ids[token] - vocab_begin;
  const bool mine = local >= 0 && local < vocab_rows;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    const uint32_t bits = mine ? static_cast<uint32_t>(table[static_cast<size_t>(local) * hidden + i]) << 16 : 0u;
    out[static_cast<size_t>(token) * hidden + i] = __uint_as_float(bits);
  }
}

// Round to nearest even, NaN kept quiet: the same bits as F32ToBF16 on the host.
__device__ uint16_t ToBf16Bits(float value) {
  const uint32_t bits = __float_as_uint(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

__global__ void CastToBf16Kernel(const float* x, uint16_t* y, size_t n) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = ToBf16Bits(x[i]);
}

__global__ void AddBiasKernel(float* y, const float* bias, int n) {
  float* row = y + static_cast<size_t>(blockIdx.x) * n;
  for (int i = threadIdx.x; i < n; i += blockDim.x) row[i] += bias[i];
}

__global__ void SiluMulRowsKernel(const float* gate_up, uint16_t* out, int n) {
  const float* gate = gate_up + static_cast<size_t>(blockIdx.x) * 2 * n;
  const float* up = gate + n;
  uint16_t* row = out + static_cast<size_t>(blockIdx.x) * n;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float g = gate[i];
    row[i] = ToBf16Bits(g / (1.0f + expf(-g)) * up[i]);
  }
}

__global__ void WriteKvKernel(const float* qkv, int row_stride, int k_offset, int v_offset, int kv_width,
                              const int32_t* slots, float* key_cache, float* value_cache) {
  if (slots[blockIdx.x] < 0) return;  // a CUDA graph's padding row
  const float* row = qkv + static_cast<size_t>(blockIdx.x) * row_stride;
  const size_t slot = static_cast<size_t>(slots[blockIdx.x]) * kv_width;
  for (int i = threadIdx.x; i < kv_width; i += blockDim.x) {
    key_cache[slot + i] = row[k_offset + i];
    value_cache[slot + i] = row[v_offset + i];
  }
}

__global__ void GatherRowsKernel(const float* x, const int32_t* rows, float* out, int n) {
  const float* from = x + static_cast<size_t>(rows[blockIdx.x]) * n;
  float* to = out + static_cast<size_t>(blockIdx.x) * n;
  for (int i = threadIdx.x; i < n; i += blockDim.x) to[i] = from[i];
}

unsigned Blocks(size_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

}  // namespace

Status RmsNorm(const float* x, const float* weight, float* y, int rows, int n, float eps, void* stream) {
  if (rows == 0) return Status::Ok();
  RmsNormKernel<<<rows, kNormThreads, 0, AsStream(stream)>>>(x, weight, y, n, eps);
  return LaunchStatus("RmsNorm");
}

Status AddRmsNorm(float* residual, const float* delta, const float* weight, float* y, int rows, int n, float eps,
                  void* stream) {
  if (rows == 0) return Status::Ok();
  AddRmsNormKernel<<<rows, kNormThreads, 0, AsStream(stream)>>>(residual, delta, weight, y, n, eps);
  return LaunchStatus("AddRmsNorm");
}

Status SiluMul(const float* gate, const float* up, float* out, size_t n, void* stream) {
  if (n == 0) return Status::Ok();
  constexpr int kThreads = 256;
  SiluMulKernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, AsStream(stream)>>>(gate, up,
                                                                                                         out, n);
  return LaunchStatus("SiluMul");
}

Status ApplyRope(float* x, const int32_t* positions, const double* inv_freq, int tokens, int heads, int head_dim,
                 void* stream) {
  return ApplyRopeStrided(x, heads * head_dim, 0, positions, inv_freq, tokens, heads, head_dim, stream);
}

Status ApplyRopeStrided(float* x, int row_stride, int offset, const int32_t* positions, const double* inv_freq,
                        int tokens, int heads, int head_dim, void* stream) {
  if (tokens == 0 || heads == 0) return Status::Ok();
  if (head_dim % 2 != 0 || head_dim / 2 > 1024) {
    return InvalidArgument("ApplyRope: head_dim " + std::to_string(head_dim) + " must be even and at most 2048");
  }
  RopeKernel<<<dim3(tokens, heads), head_dim / 2, 0, AsStream(stream)>>>(x, row_stride, offset, positions, inv_freq,
                                                                        head_dim);
  return LaunchStatus("ApplyRope");
}

Status EmbeddingGather(const uint16_t* table, const int32_t* ids, float* out, int tokens, int hidden,
                       int vocab_begin, int vocab_rows, void* stream) {
  if (tokens == 0) return Status::Ok();
  EmbeddingGatherKernel<<<tokens, 256, 0, AsStream(stream)>>>(table, ids, out, hidden, vocab_begin, vocab_rows);
  return LaunchStatus("EmbeddingGather");
}

Status CastToBf16(const float* x, uint16_t* y, size_t n, void* stream) {
  if (n == 0) return Status::Ok();
  CastToBf16Kernel<<<Blocks(n, 256), 256, 0, AsStream(stream)>>>(x, y, n);
  return LaunchStatus("CastToBf16");
}

Status AddBias(float* y, const float* bias, int rows, int n, void* stream) {
  if (rows == 0) return Status::Ok();
  AddBiasKernel<<<rows, 256, 0, AsStream(stream)>>>(y, bias, n);
  return LaunchStatus("AddBias");
}

Status SiluMulRowsToBf16(const float* gate_up, uint16_t* out, int rows, int n, void* stream) {
  if (rows == 0) return Status::Ok();
  SiluMulRowsKernel<<<rows, 256, 0, AsStream(stream)>>>(gate_up, out, n);
  return LaunchStatus("SiluMulRowsToBf16");
}

Status WriteKv(const float* qkv, int row_stride, int k_offset, int v_offset, int kv_width, const int32_t* slots,
               float* key_cache, float* value_cache, int tokens, void* stream) {
  if (tokens == 0) return Status::Ok();
  WriteKvKernel<<<tokens, 128, 0, AsStream(stream)>>>(qkv, row_stride, k_offset, v_offset, kv_width, slots,
                                                      key_cache, value_cache);
  return LaunchStatus("WriteKv");
}

Status GatherRows(const float* x, const int32_t* rows, float* out, int count, int n, void* stream) {
  if (count == 0) return Status::Ok();
  GatherRowsKernel<<<count, 256, 0, AsStream(stream)>>>(x, rows, out, n);
  return LaunchStatus("GatherRows");
}

Status PreloadOpsKernels() {
  return PreloadKernels("element-wise and norm", RmsNormKernel, AddRmsNormKernel, SiluMulKernel, RopeKernel,
                        EmbeddingGatherKernel, CastToBf16Kernel, AddBiasKernel, SiluMulRowsKernel, WriteKvKernel,
                        GatherRowsKernel);
}

}  // namespace tpserve::cuda
