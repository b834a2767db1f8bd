#include "planner/engine_calibration.h"

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
