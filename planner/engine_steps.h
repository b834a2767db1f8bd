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
//
// A prefill point: {"model", "tp", "dtype", "prompt_tokens": N, "ttft_ms": X} (batch 1: the time to
// the first token of one N-token prompt, prefilled in one step). Prefill points fit the engine's
// GEMM compute efficiency (the fraction of the profile's peak FLOPs its prefill reaches).
//
// A decode point may say "engine_mode": "eager" (default "graphs"): an engine that issues every
// kernel from its host loop, without CUDA graphs (TGI before 1.4, vLLM --enforce-eager). Eager
// points fit the host time per layer (HardwareProfile::layer_host_us) instead, on the GPU's numbers
// the other points fit (or the profile's).
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
  DecodePoint point;    // a decode point (batch and context unused for a prefill point)
  int prompt_tokens = 0;  // > 0: a prefill point, whose step_ms is the time to its first token
  bool eager = false;     // "engine_mode": "eager" (a decode point)
  double step_ms = 0;     // measured
};

// Errors name `source`, the point's index and the field.
Result<std::vector<EngineStep>> ParseEngineSteps(const nlohmann::json& value,
                                                 const std::string& source);

struct EngineFit {
  double memory_efficiency = 1;    // also the KV-read efficiency
  double layer_us = 0;             // per decoder layer
  double rms_relative_error = 0;   // of the fitted model over the decode points
  bool efficiency_fitted = false;  // false: the points cannot separate it; the profile's is kept
  int decode_points = 0, prefill_points = 0;
  double compute_efficiency = 1;          // from the prefill points (else the profile's)
  double compute_half_rows = 0;           // likewise
  double prefill_rms_relative_error = 0;  // of the fitted model over the prefill points
  int eager_points = 0;
  double layer_host_us = 0;             // from the eager points (else the profile's)
  double eager_rms_relative_error = 0;  // of the fitted model over the eager points
};

// Decode points: least squares on relative error over memory efficiency in [0.1, 1] (a grid of
// 0.005) and the per-layer time >= 0 (closed form per efficiency); points whose predicted time per
// layer agrees within 5% (one point, one model at one TP) cannot separate the two: the per-layer
// time alone is fitted. Then prefill points, with those: the compute efficiency in [0.05, 1.2] (a
// grid of 0.005) and, given two prompt lengths or more, the rows at which GEMMs reach half that
// rate (HardwareProfile::compute_half_rows, 0 to 1024 by 8), by least squares on relative error.
// Then eager decode points, with all of those: the host time per layer in [0, 5000] µs (a grid of
// 0.5 µs), by least squares on relative error. The profile's other numbers stay.
Result<EngineFit> FitEngineSteps(const std::vector<EngineStep>& steps,
                                 const HardwareProfile& profile, const EngineTraits& traits);

}  // namespace tpserve::planner
