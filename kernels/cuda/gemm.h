// The projections on the GPU: y[tokens, out] f32 = x[tokens, in] bf16 · W[out, in]ᵀ bf16 through
// cuBLASLt, with f32 accumulation. No CUDA headers; pointers are device memory.
//
// Batch invariance: each weight gets one cuBLASLt algorithm, chosen at load, that is valid for
// every token count from 1 to max_tokens and has no split-K reduction (one reduction scheme,
// none). With the same algorithm and no split over `in`, each output element's dot product runs
// the same tile loop whatever the number of tokens, so a token's result does not depend on its
// batch (the gpu tests check it bitwise).
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

// How Bf16Linear chooses its algorithm.
enum class GemmSelection {
  kBatchInvariant,  // the first heuristic pick for max_tokens without split-K that also runs at 1 token
  kHeuristic,       // cuBLASLt's first pick for max_tokens, split-K allowed (bench-only comparison)
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
