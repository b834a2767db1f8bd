#include "planner/engine_calibration.h"

#include <nlohmann/json.hpp>

#include "common/bounded_json.h"
#include "planner/engine_calibration_data.h"

namespace tpserve::planner {
namespace {

using nlohmann::json;

Result<double> Number(const json& object, const char* key, double min, double max, const std::string& where) {
  if (!object.is_object() || !object.contains(key)) return InvalidArgument(where + "." + key + ": missing");
  const json& value = object.at(key);
  if (!value.is_number()) return InvalidArgument(where + "." + key + ": must be a number");
  const double v = value.get<double>();
  if (!(v >= min && v <= max)) {
    return InvalidArgument(where + "." + key + ": " + std::to_string(v) + " is outside [" + std::to_string(min) +
                           ", " + std::to_string(max) + "]");
  }
  return v;
}

}  // namespace

Result<EngineCalibrations> ParseEngineCalibrations(const json& value, const std::string& source) {
  if (!value.is_object() || !value.contains("profiles") || !value.at("profiles").is_object()) {
    return InvalidArgument(source + ": an engine calibration is {\"profiles\": {\"GPU\": {...}, ...}}");
  }
  EngineCalibrations out;
  if (value.contains("_about") && value.at("_about").is_string()) out.description = value.at("_about").get<std::string>();
  for (const auto& [gpu, entry] : value.at("profiles").items()) {
    const std::string where = source + ": profiles." + gpu;
    EngineCalibration c;
    const json efficiency = entry.is_object() ? entry.value("efficiency", json()) : json();
    const json overheads = entry.is_object() ? entry.value("overheads", json()) : json();
    ASSIGN_OR_RETURN(c.memory_efficiency, Number(efficiency, "memory", 1e-3, 1.5, where + ".efficiency"));
    ASSIGN_OR_RETURN(c.compute_efficiency, Number(efficiency, "compute", 1e-3, 1.5, where + ".efficiency"));
    ASSIGN_OR_RETURN(c.compute_half_rows, Number(efficiency, "compute_half_rows", 0, 1e6, where + ".efficiency"));
    ASSIGN_OR_RETURN(c.layer_us, Number(overheads, "layer_us", 0, 1e6, where + ".overheads"));
    if (entry.contains("fitted_on")) {
      if (!entry.at("fitted_on").is_string()) return InvalidArgument(where + ".fitted_on: must be a string");
      c.fitted_on = entry.at("fitted_on").get<std::string>();
    }
    out.gpus[gpu] = c;
  }
  return out;
}

namespace {

// The numbers of `calibration` applied to `profile`, and the line that says so.
Result<std::string> CalibrationFor(const std::string& calibration, HardwareProfile* profile) {
  if (calibration == "none") return std::string("none (the hardware's floor: datasheet bandwidth and FLOPs)");
  EngineCalibrations calibrations;
  std::string name = calibration;
  if (calibration == "default") {
    const json value = json::parse(kEngineCalibration, nullptr, /*allow_exceptions=*/false);
    ASSIGN_OR_RETURN(calibrations, ParseEngineCalibrations(value, "engines.json"));
    name = "default engine calibration";
  } else {
    ASSIGN_OR_RETURN(const json value, ReadJsonFile(calibration));
    ASSIGN_OR_RETURN(calibrations, ParseEngineCalibrations(value, calibration));
  }
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

Result<std::string> ApplyEngineCalibration(const std::string& calibration, HardwareProfile* profile) {
  ASSIGN_OR_RETURN(profile->calibration, CalibrationFor(calibration, profile));
  return profile->calibration;
}

}  // namespace tpserve::planner
