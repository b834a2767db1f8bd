// Decode-step times of any serving engine (vLLM, TensorRT-LLM, SGLang, tpserve itself), as its
// users already have them from their own benchmarks: `plan calibrate --engine-steps FILE` fits the
// engine's achieved memory efficiency and its fixed time per decoder layer outside the modelled
// ops (small kernels, gaps between kernels, per-layer host work: what TP does not shrink), so the
// planner predicts the TP degrees and models that engine has not been run at.
//
// FILE: {"points": [...]} or a bare array; each point
//   {"model": NAME | config.json path, "tp": N, "batch": B, "context": C,
//    "dtype": "bf16" | "fp16" | "fp8", "step_ms": X}
// or, instead of step_ms, "unit": "ms_per_token" | "tokens_per_s" and "value": X, where
// tokens_per_s is one sequence's rate (1000 / step_ms). Other fields are ignored.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "planner/decode_model.h"
#include "planner/hardware_profile.h"

namespace tpserve::planner {

struct EngineStep {
  std::string where;  // "FILE: points[i]", for errors
  std::string model;  // as the file names it
  ModelConfig shape;
  DecodePoint point;
  double step_ms = 0;  // measured
};

// Errors name `source`, the point's index and the field.
Result<std::vector<EngineStep>> ParseEngineSteps(const nlohmann::json& value,
                                                 const std::string& source);

struct EngineFit {
  double memory_efficiency = 1;    // also the KV-read efficiency
  double layer_us = 0;             // per decoder layer
  double rms_relative_error = 0;   // of the fitted model over the points
  bool efficiency_fitted = false;  // false: the points cannot separate it; the profile's is kept
};

// Least squares on relative error over memory efficiency in [0.1, 1] (a grid of 0.005) and the
// per-layer time >= 0 (closed form per efficiency); the profile's other numbers stay. Points whose
// predicted time per layer agrees within 5% (one point, one model at one TP) cannot separate the
// two: the per-layer time alone is fitted.
Result<EngineFit> FitEngineSteps(const std::vector<EngineStep>& steps,
                                 const HardwareProfile& profile, const EngineTraits& traits);

}  // namespace tpserve::planner
