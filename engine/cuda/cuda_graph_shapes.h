// The fixed shapes CUDA graphs replay (`--cuda-graphs on`), decided on the host and tested on the
// CPU. A graph is captured per (batch size, context size) bucket, as vLLM and SGLang capture per
// batch size: a pure decode step (one token per sequence, each wanting logits) is padded up to its
// bucket so that every kernel of the step has the arguments it was captured with.
//
// Padding rows are inert: token 0 at position 0, KV slot -1 (WriteKv skips it), a block table of
// block 0 alone (read, never written), logits row = its own row, no sampling bans and sampled on
// the host (so its token is never read). Real rows compute exactly what they would unpadded:
// every kernel of the CUDA decoder treats rows independently (docs/ARCHITECTURE.md, "Determinism
// on the GPU").
#pragma once

#include <vector>

#include "common/status.h"
#include "engine/step/packed_step.h"

namespace tpserve {

// Batch buckets up to `max_batch`: 1, 2, 4, 8, then every multiple of 8 (vLLM's capture sizes).
std::vector<int> CudaGraphBatchSizes(int max_batch);

// Context buckets: powers of two from 256 up to `max_context` (the last one is max_context).
std::vector<int> CudaGraphContextSizes(int max_context);

// The smallest size in `sizes` that is at least `n`; 0 when none is.
int BucketFor(int n, const std::vector<int>& sizes);

// Whether `step` is a pure decode step: one token per sequence, every token's logits wanted, in
// order.
bool IsPureDecode(const PackedStep& step);

// Pads a pure decode step to `batch` rows with block tables `width` wide, and its sampling plan
// with it. Errors when the step does not fit (more rows or a wider table).
Status PadDecodeStep(int batch, int width, PackedStep* step, DeviceSamplingPlan* sampling);

}  // namespace tpserve
