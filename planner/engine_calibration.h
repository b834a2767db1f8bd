// What serving engines achieve on each preset's GPU, as a calibration the presets are used with
// by default: the memory efficiency and fixed time per decoder layer of decode steps, and the
// compute efficiency (and its rise with the rows) of prefill, fitted by `plan calibrate
// --engine-steps` on published engine timings (benchmarks/planner/fit_engine_calibration.py
// writes planner/calibrations/engines.json, compiled in). A preset alone is the hardware's floor,
// about 40% faster than any published engine; `--calibration none` keeps that floor, `default` the
// compiled-in calibration, and a file of the same form another one.
#pragma once

#include <map>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "common/status.h"
#include "planner/hardware_profile.h"

namespace tpserve::planner {

// One GPU's fitted numbers: they replace the preset's.
struct EngineCalibration {
  double memory_efficiency = 1;  // also the KV-read efficiency
  double layer_us = 0;
  double compute_efficiency = 1;
  double compute_half_rows = 0;
  std::string fitted_on;  // what it was fitted on, one line
};

// An engine without CUDA graphs (TGI before 1.4, vLLM --enforce-eager) issues every kernel from its
// host loop: the host time per decoder layer it needs (HardwareProfile::layer_host_us), on any GPU.
struct EagerCalibration {
  double layer_host_us = 0;
  std::string fitted_on;
};

struct EngineCalibrations {
  std::string description;                        // the file's "_about"
  std::map<std::string, EngineCalibration> gpus;  // by preset name
  std::optional<EagerCalibration> eager;          // absent: the file cannot price an eager engine
};

// {"_about": "...", "profiles": {"a100-sxm": {"efficiency": {"memory", "compute",
// "compute_half_rows"}, "overheads": {"layer_us"}, "fitted_on": "..."}, ...}, "eager":
// {"layer_host_us": ..., "fitted_on": "..."}} ("eager" optional); errors name `source` and the
// field.
Result<EngineCalibrations> ParseEngineCalibrations(const nlohmann::json& value, const std::string& source);

// What `plan` prices: an engine calibration ("default": the compiled-in one; "none": the
// hardware's floor; else a file) and how the engine issues its kernels: "graphs" (CUDA graphs or a
// C++ runtime: the host keeps ahead of the GPU; vLLM's and SGLang's default, TensorRT-LLM,
// LMDeploy's TurboMind) or "eager" (the calibration's eager entry).
struct CalibrationChoice {
  std::string calibration = "default";
  std::string engine_mode = "graphs";
};

// Applies `choice` to `profile`, for the GPU the profile is (its name; a calibrated file's
// "-calibrated" name keeps its own numbers). Returns the line `plan` prints about it; an eager
// engine with a calibration that has no eager entry ("none" included) is an error that says so.
Result<std::string> ApplyEngineCalibration(const CalibrationChoice& choice, HardwareProfile* profile);

}  // namespace tpserve::planner
