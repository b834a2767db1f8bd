// What batch invariance costs in the GEMMs: for each projection of a model shape (default
// llama-3-8b at TP=1) and token counts 1..32, the decoder's algorithm (one per weight, chosen by
// cuBLASLt's heuristic for kGemmDecodeTokens tokens, no split-K, valid for 1..8192) and the former
// rule (chosen for 8192 tokens) against cuBLASLt's own first pick for that exact token count
// (split-K allowed), all timed with CUDA events in the same run, next to the weight-streaming
// floor (weight bytes / the GPU's read bandwidth, measured here too). Each call reads the next of
// several weight copies that together exceed twice the L2 cache, so no call finds its weight
// there (an H200's 60 MB L2 holds a whole o_proj).
//
//   bench_cuda_gemm [--hidden 4096 --ffn 14336 --heads 32 --kv-heads 8 --head-dim 128 --vocab 128256]
//                   [--tokens 1,8,32] [--reps 50]
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "benchmarks/cuda_event_timer.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/memory_bandwidth.h"

namespace {

using tpserve::cuda::Bf16Linear;
using tpserve::cuda::GemmSelection;

// Median µs per call of `linear` at `tokens`, each call on the next weight copy.
double TimeUs(Bf16Linear& linear, const std::vector<const uint16_t*>& weights, const uint16_t* x, float* y,
              int tokens, int reps) {
  size_t next = 0;
  return tpserve::bench::MedianEventUs(
      [&] { (void)linear.Run(weights[next++ % weights.size()], x, y, tokens, nullptr); }, reps);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("cuBLASLt: the batch-invariant algorithm vs the per-token-count heuristic pick");
  int hidden = 4096, ffn = 14336, heads = 32, kv_heads = 8, head_dim = 128, vocab = 128256, reps = 50;
  std::vector<int> token_counts = {1, 8, 32};
  app.add_option("--hidden", hidden);
  app.add_option("--ffn", ffn);
  app.add_option("--heads", heads);
  app.add_option("--kv-heads", kv_heads);
  app.add_option("--head-dim", head_dim);
  app.add_option("--vocab", vocab);
  app.add_option("--tokens", token_counts)->delimiter(',');
  app.add_option("--reps", reps);
  CLI11_PARSE(app, argc, argv);

  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "bench_cuda_gemm: no usable GPU\n");
    return 1;
  }
  auto bandwidth = tpserve::cuda::MeasureReadBandwidth(size_t{4} << 30, 5);
  auto blas = tpserve::cuda::BlasContext::Create(32u << 20);
  if (!bandwidth.ok() || !blas.ok()) {
    std::fprintf(stderr, "bench_cuda_gemm: %s\n",
                 (!bandwidth.ok() ? bandwidth.status() : blas.status()).ToString().c_str());
    return 1;
  }
  std::printf("GPU read bandwidth %.0f GB/s (read-only kernel over 4 GiB, this run)\n", *bandwidth);
  int l2_bytes = 0;
  cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, 0);
  std::printf("L2 cache %.0f MB: weights rotate over copies of at least twice that\n", l2_bytes / 1e6);
  std::printf("%-8s %7s %6s %6s %10s %10s %10s %9s %10s %8s  %s | %s | %s\n", "proj", "out", "in", "tokens",
              "invariant", "for_8192", "heuristic", "inv/heur", "floor_us", "inv/floor", "invariant algo",
              "for-8192 algo", "heuristic algo");
  const struct {
    const char* name;
    int out, in;
  } shapes[] = {{"qkv", (heads + 2 * kv_heads) * head_dim, hidden},
                {"o", hidden, heads * head_dim},
                {"gate_up", 2 * ffn, hidden},
                {"down", hidden, ffn},
                {"lm_head", vocab, hidden}};
  const int max_tokens = *std::max_element(token_counts.begin(), token_counts.end());
  for (const auto& shape : shapes) {
    const size_t weight_bytes = static_cast<size_t>(shape.out) * shape.in * 2;
    const size_t copies = std::max<size_t>(1, (2 * static_cast<size_t>(l2_bytes)) / weight_bytes + 1);
    void *w = nullptr, *x = nullptr, *y = nullptr;
    if (cudaMalloc(&w, weight_bytes * copies) != cudaSuccess ||
        cudaMalloc(&x, static_cast<size_t>(max_tokens) * shape.in * 2) != cudaSuccess ||
        cudaMalloc(&y, static_cast<size_t>(max_tokens) * shape.out * 4) != cudaSuccess) {
      std::fprintf(stderr, "%s: cudaMalloc failed\n", shape.name);
      return 1;
    }
    cudaMemset(w, 0x3c, weight_bytes * copies);  // bf16 0x3c3c = 0.0115: finite, nonzero
    cudaMemset(x, 0x3c, static_cast<size_t>(max_tokens) * shape.in * 2);
    std::vector<const uint16_t*> weights;
    for (size_t c = 0; c < copies; ++c) weights.push_back(static_cast<const uint16_t*>(w) + c * weight_bytes / 2);
    auto invariant = Bf16Linear::Create(**blas, shape.out, shape.in, 8192);
    auto former = Bf16Linear::Create(**blas, shape.out, shape.in, 8192, GemmSelection::kBatchInvariantMaxTokens);
    for (int tokens : token_counts) {
      auto heuristic = Bf16Linear::Create(**blas, shape.out, shape.in, tokens, GemmSelection::kHeuristic);
      for (const auto* made : {&invariant, &former, &heuristic}) {
        if (!made->ok()) {
          std::fprintf(stderr, "%s: %s\n", shape.name, made->status().ToString().c_str());
          return 1;
        }
      }
      const auto* xb = static_cast<const uint16_t*>(x);
      auto* yf = static_cast<float*>(y);
      const double inv_us = TimeUs(**invariant, weights, xb, yf, tokens, reps);
      const double former_us = TimeUs(**former, weights, xb, yf, tokens, reps);
      const double heur_us = TimeUs(**heuristic, weights, xb, yf, tokens, reps);
      const double floor_us = weight_bytes / (*bandwidth * 1e9) * 1e6;
      std::printf("%-8s %7d %6d %6d %10.1f %10.1f %10.1f %8.2fx %10.1f %7.2fx  %s | %s | %s\n", shape.name,
                  shape.out, shape.in, tokens, inv_us, former_us, heur_us, inv_us / heur_us, floor_us,
                  inv_us / floor_us, (*invariant)->algorithm().c_str(), (*former)->algorithm().c_str(),
                  (*heuristic)->algorithm().c_str());
    }
    cudaFree(w);
    cudaFree(x);
    cudaFree(y);
  }
  return 0;
}
