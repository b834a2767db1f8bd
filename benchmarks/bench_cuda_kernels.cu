// Each non-GEMM kernel of a decode step against its memory floor: for a model shape (default
// llama-3-8b at TP=1) and token counts, the median time of one call (CUDA events, this run) next to
// the bytes it must move divided by the GPU's read bandwidth (measured here too), and the ratio.
// Small calls sit on the launch floor instead: an empty kernel's time is printed as that floor.
//
//   bench_cuda_kernels [--hidden 4096 --ffn 14336 --heads 32 --kv-heads 8 --head-dim 128]
//                      [--tokens 1,8,32] [--context 512] [--reps 50]
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "benchmarks/cuda_event_timer.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/memory_bandwidth.h"
#include "kernels/cuda/ops.h"

namespace {

__global__ void EmptyKernel() {}

// A zeroed device buffer that frees itself.
struct Buffer {
  explicit Buffer(size_t bytes) {
    cudaMalloc(&data, std::max<size_t>(bytes, 16));
    cudaMemset(data, 0, std::max<size_t>(bytes, 16));
  }
  ~Buffer() { cudaFree(data); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
  void* data = nullptr;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "The decode step's element-wise, norm and attention kernels against their memory floors");
  int hidden = 4096, ffn = 14336, heads = 32, kv_heads = 8, head_dim = 128, context = 512,
      reps = 50;
  std::vector<int> token_counts = {1, 8, 32};
  app.add_option("--hidden", hidden);
  app.add_option("--ffn", ffn);
  app.add_option("--heads", heads);
  app.add_option("--kv-heads", kv_heads);
  app.add_option("--head-dim", head_dim);
  app.add_option("--context", context, "Positions each token attends to (attention's KV reads)");
  app.add_option("--tokens", token_counts)->delimiter(',');
  app.add_option("--reps", reps);
  CLI11_PARSE(app, argc, argv);

  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "bench_cuda_kernels: no usable GPU\n");
    return 1;
  }
  auto bandwidth = tpserve::cuda::MeasureReadBandwidth(size_t{4} << 30, 5);
  if (!bandwidth.ok()) {
    std::fprintf(stderr, "bench_cuda_kernels: %s\n", bandwidth.status().ToString().c_str());
    return 1;
  }
  const double launch_us = tpserve::bench::MedianEventUs([] { EmptyKernel<<<1, 32>>>(); }, reps);
  std::printf(
      "GPU read bandwidth %.0f GB/s (read-only kernel over 4 GiB, this run); empty kernel %.2f "
      "us\n",
      *bandwidth, launch_us);
  std::printf("%-14s %6s %10s %10s %12s %9s\n", "kernel", "tokens", "time_us", "floor_us", "bytes",
              "x_floor");

  const int max_tokens = *std::max_element(token_counts.begin(), token_counts.end());
  const int q_width = heads * head_dim, kv_width = kv_heads * head_dim,
            qkv_width = q_width + 2 * kv_width;
  const int block_size = 16;
  const int blocks_per_sequence = (context + block_size - 1) / block_size;
  const size_t f32 = 4, bf16 = 2;
  Buffer x(f32 * max_tokens * hidden), y(f32 * max_tokens * hidden),
      delta(f32 * max_tokens * hidden);
  Buffer weight(f32 * hidden), y_bf16(bf16 * max_tokens * std::max(hidden, ffn));
  Buffer gate_up(f32 * max_tokens * 2 * ffn), qkv(f32 * max_tokens * qkv_width),
      attn(f32 * max_tokens * q_width);
  Buffer positions(sizeof(int32_t) * max_tokens), slots(sizeof(int32_t) * max_tokens);
  Buffer token_sequence(sizeof(int32_t) * max_tokens), inv_freq(sizeof(double) * head_dim / 2);
  Buffer block_tables(sizeof(int32_t) * max_tokens * blocks_per_sequence);
  Buffer keys(f32 * max_tokens * blocks_per_sequence * block_size * kv_width);
  Buffer values(f32 * max_tokens * blocks_per_sequence * block_size * kv_width);
  Buffer scratch(f32 *
                 tpserve::cuda::PagedAttentionScratchFloats(max_tokens, heads, head_dim, context));
  {
    // Token t: position context - 1 of sequence t, whose blocks are t * blocks_per_sequence + i.
    std::vector<int32_t> pos(max_tokens, context - 1), seq(max_tokens), slot(max_tokens), table;
    for (int t = 0; t < max_tokens; ++t) {
      seq[t] = t;
      for (int i = 0; i < blocks_per_sequence; ++i) table.push_back(t * blocks_per_sequence + i);
      slot[t] = table[t * blocks_per_sequence + (context - 1) / block_size] * block_size +
                (context - 1) % block_size;
    }
    cudaMemcpy(positions.data, pos.data(), pos.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(token_sequence.data, seq.data(), seq.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(slots.data, slot.data(), slot.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(block_tables.data, table.data(), table.size() * 4, cudaMemcpyHostToDevice);
  }

  for (int tokens : token_counts) {
    const size_t t = static_cast<size_t>(tokens);
    struct Case {
      const char* name;
      double bytes;  // what the kernel must read and write at least
      std::function<void()> launch;
    };
    const std::vector<Case> cases = {
        {"rms_norm", f32 * (2.0 * t * hidden + hidden),
         [&] {
           (void)tpserve::cuda::RmsNorm(x.as<float>(), weight.as<float>(), y.as<float>(), tokens,
                                        hidden, 1e-5f, nullptr);
         }},
        {"add_rms_norm", f32 * (4.0 * t * hidden + hidden),
         [&] {
           (void)tpserve::cuda::AddRmsNorm(x.as<float>(), delta.as<float>(), weight.as<float>(),
                                           y.as<float>(), tokens, hidden, 1e-5f, nullptr);
         }},
        {"cast_bf16", 1.0 * (f32 + bf16) * t * hidden,
         [&] {
           (void)tpserve::cuda::CastToBf16(x.as<float>(), y_bf16.as<uint16_t>(), t * hidden,
                                           nullptr);
         }},
        {"silu_mul", (2.0 * f32 + bf16) * t * ffn,
         [&] {
           (void)tpserve::cuda::SiluMulRowsToBf16(gate_up.as<float>(), y_bf16.as<uint16_t>(),
                                                  tokens, ffn, nullptr);
         }},
        {"rope_q_k", 2.0 * f32 * t * (q_width + kv_width),
         [&] {
           (void)tpserve::cuda::ApplyRopeStrided(qkv.as<float>(), qkv_width, 0,
                                                 positions.as<int32_t>(), inv_freq.as<double>(),
                                                 tokens, heads, head_dim, nullptr);
           (void)tpserve::cuda::ApplyRopeStrided(qkv.as<float>(), qkv_width, q_width,
                                                 positions.as<int32_t>(), inv_freq.as<double>(),
                                                 tokens, kv_heads, head_dim, nullptr);
         }},
        {"kv_write", 4.0 * f32 * t * kv_width,
         [&] {
           (void)tpserve::cuda::WriteKv(qkv.as<float>(), qkv_width, q_width, q_width + kv_width,
                                        kv_width, slots.as<int32_t>(), keys.as<float>(),
                                        values.as<float>(), tokens, nullptr);
         }},
        {"attention", f32 * t * (2.0 * context * kv_width + 2.0 * q_width),
         [&] {
           tpserve::cuda::PagedAttentionArgs a;
           a.q = qkv.as<float>();
           a.q_stride = qkv_width;
           a.key_cache = keys.as<float>();
           a.value_cache = values.as<float>();
           a.block_tables = block_tables.as<int32_t>();
           a.block_table_width = blocks_per_sequence;
           a.token_sequence = token_sequence.as<int32_t>();
           a.positions = positions.as<int32_t>();
           a.out = attn.as<float>();
           a.scratch = scratch.as<float>();
           a.scratch_floats = tpserve::cuda::PagedAttentionScratchFloats(max_tokens, heads, head_dim, context);
           a.tokens = tokens;
           a.heads = heads;
           a.kv_heads = kv_heads;
           a.head_dim = head_dim;
           a.block_size = block_size;
           a.max_context = context;
           a.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
           (void)tpserve::cuda::PagedAttention(a, nullptr);
         }},
    };
    for (const Case& c : cases) {
      const double us = tpserve::bench::MedianEventUs(c.launch, reps);
      const double floor_us = std::max(c.bytes / (*bandwidth * 1e9) * 1e6, launch_us);
      std::printf("%-14s %6d %10.2f %10.2f %12.0f %8.2fx\n", c.name, tokens, us, floor_us, c.bytes,
                  us / floor_us);
    }
  }
  if (cudaGetLastError() != cudaSuccess) {
    std::fprintf(stderr, "bench_cuda_kernels: a kernel failed\n");
    return 1;
  }
  return 0;
}
