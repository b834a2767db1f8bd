// What serving engines achieve on each preset's GPU, as a calibration the presets are used with
// by default: the memory efficiency and fixed time per decoder layer of decode steps, and the
// compute efficiency (and its rise with the rows) of prefill, fitted by `plan calibrate
// --engine-steps` on published engine timings (benchmarks/planner/fit_engine_calibration.py
// writes planner/calibrations/engines.json, compiled in). A preset alone is the hardware's floor,
// about 40% faster than any published engine; `--calibration none` keeps that floor, `default` the
// compiled-in calibration, and a file of the same form another one.
#pragma once

#include <map>
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

struct EngineCalibrations {
  std::string description;                        // the file's "_about"
  std::map<std::string, EngineCalibration> gpus;  // by preset name
};

// {"_about": "...", "profiles": {"a100-sxm": {"efficiency": {"memory", "compute",
// "compute_half_rows"}, "overheads": {"layer_us"}, "fitted_on": "..."}, ...}}; errors name
// `source` and the field.
Result<EngineCalibrations> ParseEngineCalibrations(const nlohmann::json& value, const std::string& source);

// Applies `calibration` ("default": the compiled-in one; "none": nothing; else a file) to
// `profile`, for the GPU the profile is (its name; a calibrated file's "-calibrated" name keeps its
// own numbers). Returns the line `plan` prints about it.
Result<std::string> ApplyEngineCalibration(const std::string& calibration, HardwareProfile* profile);

}  // namespace tpserve::planner
