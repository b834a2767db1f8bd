// The seam between the engine and a backend: what one tensor-parallel rank runs every step. The
// CPU backend's Decoder (engine/cpu/decoder.h) and the CUDA backend's decoder (engine/cuda/, inside the
// module loaded at run time) both implement it; the engine, scheduler, step plans, sampling and
// trace format are the same above it. No CUDA headers here.
#pragma once

#include <span>
#include <vector>

#include "common/status.h"
#include "engine/step/rank_weights.h"
#include "engine/step/step_plan.h"

namespace tpserve {

class RankDecoder {
 public:
  virtual ~RankDecoder() = default;

  // Runs the plan on this rank, on the engine's thread for this rank. On return rank 0's `logits`
  // holds [rows, vocab_padded] f32 for the sequences that want logits, in plan order — or, when
  // logits were not asked for, only the rows the host samples (the others unspecified), or nothing
  // when the device sampled every row (device_tokens); pass the same vector every step so its
  // memory is reused. `trace` gets this rank's ops.
  virtual Status Forward(const StepPlan& plan, std::vector<float>* logits, RankTrace* trace) = 0;

  // After Forward, on rank 0: one token per logit row that the backend sampled itself (-1: the
  // engine samples that row on the host from the logits); empty when it samples nothing.
  virtual std::span<const int32_t> device_tokens() const { return {}; }

  virtual const RankShape& shape() const = 0;

  // Per-op timing on or off (off: only the rank's total). Between steps only.
  virtual void set_trace(bool on) = 0;

  // After a failed Forward, on this rank's engine thread: breaks this rank's collectives so that
  // peers waiting in one fail now instead of at their timeout, and every later one fails.
  virtual void AbortCollectives() = 0;
};

}  // namespace tpserve
