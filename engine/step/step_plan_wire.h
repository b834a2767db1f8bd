// A StepPlan as bytes, for the leader to send its followers every step (multi-process TP): a
// versioned, little-endian binary form with no dependency (no protobuf in model/). Decoding checks
// every count against the bytes that are left, so a short or corrupted message is an error that
// names the field, never a crash or an over-read.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/step/step_plan.h"

namespace tpserve {

inline constexpr uint32_t kStepPlanMagic = 0x50535054;  // "TPSP"
inline constexpr uint16_t kStepPlanWireVersion = 1;

// Appends the plan's bytes to `out` (cleared first; its capacity is reused step after step).
void EncodeStepPlan(const StepPlan& plan, std::vector<uint8_t>* out);

Result<StepPlan> DecodeStepPlan(std::span<const uint8_t> bytes);

}  // namespace tpserve
