// The projections on the GPU: y[tokens, out] f32 = x[tokens, in] bf16 · W[out, in]ᵀ bf16 through
// cuBLASLt, with f32 accumulation. No CUDA headers; pointers are device memory.
//
// Batch invariance: each weight gets one cuBLASLt algorithm, chosen at load, that is valid for
// every token count from 1 to max_tokens and has no split-K reduction (one reduction scheme,
// none). With the same algorithm and no split over `in`, each output element's dot product runs
// the same tile loop whatever the number of tokens, so a token's result does not depend on its
// batch (the gpu tests check it bitwise).
//
// Which algorithm: cuBLASLt's heuristic asked for kGemmDecodeTokens tokens (decode, where the
// weight-streaming GEMMs dominate), its first pick without split-K that also runs at 1 and at
// max_tokens. Asked for max_tokens instead, it picks large tiles (out / 256 thread blocks at 1-32
// tokens: 16-48 blocks on 132 SMs, far from the GPU's bandwidth). The heuristic is a function of
// the GPU model, the cuBLASLt version and the shape alone, so every rank and every restart on the
// same hardware gets the same algorithm (and the same bits); the decoder logs each choice.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace tpserve::cuda {

// One cuBLASLt handle and workspace per GPU (per rank thread: not shared between threads).
class BlasContext {
 public:
  static Result<std::unique_ptr<BlasContext>> Create(size_t workspace_bytes);
  ~BlasContext();
  BlasContext(const BlasContext&) = delete;
  BlasContext& operator=(const BlasContext&) = delete;

  void* handle() const { return handle_; }
  void* workspace() const { return workspace_; }
  size_t workspace_bytes() const { return workspace_bytes_; }

 private:
  BlasContext() = default;
  void* handle_ = nullptr;     // cublasLtHandle_t
  void* workspace_ = nullptr;  // device memory
  size_t workspace_bytes_ = 0;
};

inline constexpr int kGemmDecodeTokens = 32;

// How Bf16Linear chooses its algorithm.
enum class GemmSelection {
  kBatchInvariant,           // the decoder's: chosen for kGemmDecodeTokens, as above
  kBatchInvariantMaxTokens,  // the same, chosen for max_tokens (the former rule; bench comparison)
  kHeuristic,                // cuBLASLt's first pick for max_tokens, split-K allowed (bench comparison)
};

class Bf16Linear {
 public:
  // Chooses the algorithm for a weight [out, in] (kBatchInvariant for the decoder). An error names
  // the shape.
  static Result<std::unique_ptr<Bf16Linear>> Create(const BlasContext& blas, int out, int in, int max_tokens,
                                                    GemmSelection selection = GemmSelection::kBatchInvariant);
  ~Bf16Linear();
  Bf16Linear(const Bf16Linear&) = delete;
  Bf16Linear& operator=(const Bf16Linear&) = delete;

  //   w: [out, in] bf16 (Hugging Face layout); x: [tokens, in] bf16; y: [tokens, out] f32.
  Status Run(const uint16_t* w, const uint16_t* x, float* y, int tokens, void* stream);

  int out() const { return out_; }
  int in() const { return in_; }
  int max_tokens() const { return max_tokens_; }
  const std::string& algorithm() const { return algorithm_; }  // "algo 23 tile 18 stages 8 ..."

 private:
  struct Impl;
  Bf16Linear(const BlasContext& blas, int out, int in, int max_tokens);
  const BlasContext& blas_;
  int out_, in_, max_tokens_;
  std::string algorithm_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tpserve::cuda
