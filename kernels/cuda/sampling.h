// Greedy sampling on the GPU, with the CPU sampler's semantics (engine/step/sampler.cc GreedyId): the
// largest logit, the lowest id on ties, NaN never chosen over a number, banned ids (stop and eos
// ids before min_tokens) skipped. Rows that need temperature, top-k / top-p or logprobs are
// sampled on the host from the downloaded logits. No CUDA headers; pointers are device memory.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace tpserve::cuda {

struct GreedyArgs {
  // Logits of `rows` rows laid out as the vocab-parallel LM head and its AllGather leave them:
  // [tp, rows, vocab_local] f32, id j of row r at ((j / vocab_local) * rows + r) * vocab_local +
  // j % vocab_local. (tp = 1: plain [rows, vocab_local].)
  const float* logits = nullptr;
  int rows = 0;
  int tp = 1;
  int vocab_local = 0;
  int vocab_size = 0;  // ids past it are padding and never chosen
  // Row r's banned ids: banned_ids[banned_offsets[r] .. banned_offsets[r + 1]).
  const int32_t* banned_offsets = nullptr;  // [rows + 1]
  const int32_t* banned_ids = nullptr;
  int32_t* out = nullptr;  // [rows]
};

Status GreedySample(const GreedyArgs& args, void* stream);

// Loads the sampling kernel now (kernels/cuda/preload.cuh says why).
Status PreloadSamplingKernels();

}  // namespace tpserve::cuda
