#include "planner/engine_calibration.h"

#include <cstdio>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/bounded_json.h"
#include "planner/engine_calibration_data.h"
#include "planner/json_fields.h"

namespace tpserve::planner {

using nlohmann::json;

Result<EngineCalibrations> ParseEngineCalibrations(const json& value, const std::string& source) {
  if (!value.is_object() || !value.contains("profiles") || !value.at("profiles").is_object()) {
    return InvalidArgument(source + ": an engine calibration is {\"profiles\": {\"GPU\": {...}, ...}}");
  }
  EngineCalibrations out;
  const Fields top(value, source, "");
  RETURN_IF_ERROR(top.Text("_about", &out.description, false));
  ASSIGN_OR_RETURN(const Fields profiles, top.Object("profiles"));
  for (const auto& [gpu, entry] : value.at("profiles").items()) {
    const std::string where = "profiles." + gpu;
    if (!entry.is_object()) return profiles.Error(gpu, "must be an object");
    const Fields fields(entry, source, where);
    ASSIGN_OR_RETURN(const Fields efficiency, fields.Object("efficiency"));
    ASSIGN_OR_RETURN(const Fields overheads, fields.Object("overheads"));
    EngineCalibration c;
    RETURN_IF_ERROR(efficiency.Number("memory", &c.memory_efficiency, 1e-3, 1.5));
    RETURN_IF_ERROR(efficiency.Number("compute", &c.compute_efficiency, 1e-3, 1.5));
    RETURN_IF_ERROR(efficiency.Number("compute_half_rows", &c.compute_half_rows, 0, 1e6));
    RETURN_IF_ERROR(overheads.Number("layer_us", &c.layer_us, 0, 1e6));
    RETURN_IF_ERROR(fields.Text("fitted_on", &c.fitted_on, false));
    out.gpus[gpu] = c;
  }
  if (value.contains("eager")) {
    ASSIGN_OR_RETURN(const Fields eager, top.Object("eager"));
    EagerCalibration e;
    RETURN_IF_ERROR(eager.Number("layer_host_us", &e.layer_host_us, 0, 1e6));
    RETURN_IF_ERROR(eager.Text("fitted_on", &e.fitted_on, false));
    out.eager = e;
  }
  return out;
}

namespace {

// The engine calibration `calibration` names: the compiled-in default, or a file.
Result<EngineCalibrations> LoadCalibrations(const std::string& calibration) {
  if (calibration == "default") {
    const json value = json::parse(kEngineCalibration, nullptr, /*allow_exceptions=*/false);
    return ParseEngineCalibrations(value, "engines.json");
  }
  ASSIGN_OR_RETURN(const json value, ReadJsonFile(calibration));
  return ParseEngineCalibrations(value, calibration);
}

// The numbers of `calibration` applied to `profile`, and the line that says so.
Result<std::string> CalibrationFor(const std::string& calibration, const EngineCalibrations& calibrations,
                                   HardwareProfile* profile) {
  if (calibration == "none") return std::string("none (the hardware's floor: datasheet bandwidth and FLOPs)");
  const std::string name = calibration == "default" ? "default engine calibration" : calibration;
  auto it = calibrations.gpus.find(profile->name);
  if (it == calibrations.gpus.end()) {
    return calibration == "default" ? std::string("the profile's own numbers (no default for ") + profile->name + ")"
                                    : std::string("none (") + name + " has no entry for " + profile->name + ")";
  }
  const EngineCalibration& c = it->second;
  profile->memory_efficiency = profile->attention_efficiency = c.memory_efficiency;
  profile->layer_us = c.layer_us;
  profile->compute_efficiency = c.compute_efficiency;
  profile->compute_half_rows = c.compute_half_rows;
  profile->sources["engine_calibration"] = name + ": " + c.fitted_on;
  return name + " for " + profile->name + ": " + c.fitted_on;
}

}  // namespace

Result<std::string> ApplyEngineCalibration(const CalibrationChoice& choice, HardwareProfile* profile) {
  if (choice.engine_mode != "graphs" && choice.engine_mode != "eager") {
    return InvalidArgument("--engine-mode: \"" + choice.engine_mode + "\" is not graphs or eager");
  }
  const bool eager = choice.engine_mode == "eager";
  if (eager && choice.calibration == "none") {
    return InvalidArgument("--engine-mode eager needs an engine calibration with an \"eager\" entry (--calibration "
                           "default has one); none is the hardware's floor");
  }
  EngineCalibrations calibrations;
  if (choice.calibration != "none") {
    Result<EngineCalibrations> loaded = LoadCalibrations(choice.calibration);
    if (!loaded.ok()) return InvalidArgument("--calibration: " + std::string(loaded.status().message()));
    calibrations = *std::move(loaded);
  }
  ASSIGN_OR_RETURN(std::string line, CalibrationFor(choice.calibration, calibrations, profile));
  if (eager) {
    if (!calibrations.eager) {
      return InvalidArgument("--engine-mode eager: " + choice.calibration + " has no \"eager\" entry");
    }
    profile->layer_host_us = calibrations.eager->layer_host_us;
    char host[64];
    std::snprintf(host, sizeof(host), "%.0f us of host time per layer", profile->layer_host_us);
    line += "; eager engine (" + std::string(host) + ": " + calibrations.eager->fitted_on + ")";
    profile->sources["engine_mode"] = "eager: " + calibrations.eager->fitted_on;
  }
  profile->calibration = line;
  return line;
}

}  // namespace tpserve::planner
