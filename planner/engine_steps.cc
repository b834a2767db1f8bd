#include "planner/engine_steps.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "common/json_int.h"
#include "model/model_directory.h"

namespace tpserve::planner {
namespace {

using nlohmann::json;

// Parses one point; exceptions (nlohmann's, JsonInt's) name the field and are caught by the caller.
Result<EngineStep> ParsePoint(const json& p, const std::string& where) {
  if (!p.is_object()) return InvalidArgument(where + ": not an object");
  EngineStep s;
  s.where = where;
  if (!p.contains("model") || !p.at("model").is_string())
    return InvalidArgument(where + ": model: missing or not a string");
  s.model = p.at("model").get<std::string>();
  auto shape = ResolveModelShape({.model = s.model, .load_format = "dummy"});
  if (!shape.ok())
    return InvalidArgument(where + ": model: " + std::string(shape.status().message()));
  s.shape = *shape;
  s.point.tp = JsonInt<int>(p.at("tp"), "tp");
  s.point.batch = JsonInt<int>(p.at("batch"), "batch");
  s.point.context = JsonInt<int>(p.at("context"), "context");
  if (s.point.tp < 1) return InvalidArgument(where + ": tp: must be at least 1");
  if (s.point.batch < 1) return InvalidArgument(where + ": batch: must be at least 1");
  if (s.point.context < 1) return InvalidArgument(where + ": context: must be at least 1");
  const std::string dtype = p.value("dtype", std::string("bf16"));
  if (dtype != "bf16" && dtype != "fp16" && dtype != "fp8") {
    return InvalidArgument(where + ": dtype: \"" + dtype + "\" is not bf16, fp16 or fp8");
  }
  s.point.weight_bytes = dtype == "fp8" ? 1 : 2;
  if (p.contains("step_ms")) {
    s.step_ms = p.at("step_ms").get<double>();
  } else if (p.contains("unit") && p.contains("value")) {
    const std::string unit = p.at("unit").get<std::string>();
    const double value = p.at("value").get<double>();
    if (unit == "ms_per_token") {
      s.step_ms = value;
    } else if (unit == "tokens_per_s") {
      s.step_ms = value > 0 ? 1e3 / value : 0;
    } else {
      return InvalidArgument(where + ": unit: \"" + unit +
                             "\" is not ms_per_token or tokens_per_s");
    }
  } else {
    return InvalidArgument(where + ": needs step_ms, or unit and value");
  }
  if (!(s.step_ms > 0) || !std::isfinite(s.step_ms))
    return InvalidArgument(where + ": the step time must be positive");
  return s;
}

// Predicted step times (ms) at memory efficiency `e` and no per-layer overhead.
Result<std::vector<double>> StepsAt(const std::vector<EngineStep>& steps, HardwareProfile p,
                                    const EngineTraits& traits, double e) {
  p.memory_efficiency = p.attention_efficiency = e;
  p.layer_us = 0;
  std::vector<double> out;
  for (const EngineStep& s : steps) {
    auto d = PredictDecodeStep(s.shape, p, traits, s.point);
    if (!d.ok()) return InvalidArgument(s.where + ": " + std::string(d.status().message()));
    out.push_back(d->step_ms);
  }
  return out;
}

// The per-layer time (ms, >= 0) minimising the squared relative error given the predicted steps
// without it, and that error.
std::pair<double, double> BestLayerTime(const std::vector<EngineStep>& steps,
                                        const std::vector<double>& predicted) {
  double numerator = 0, denominator = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const double m = steps[i].step_ms, layers = steps[i].shape.num_layers;
    numerator += layers * (m - predicted[i]) / (m * m);
    denominator += layers * layers / (m * m);
  }
  const double layer = std::max(0.0, numerator / denominator);
  double squares = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    squares +=
        std::pow((predicted[i] + steps[i].shape.num_layers * layer) / steps[i].step_ms - 1, 2);
  }
  return {layer, squares};
}

}  // namespace

Result<std::vector<EngineStep>> ParseEngineSteps(const json& value, const std::string& source) {
  const json& points = value.is_object() ? value.value("points", json()) : value;
  if (!points.is_array() || points.empty()) {
    return InvalidArgument(
        source + ": expected {\"points\": [...]} or an array of points, with at least one point");
  }
  std::vector<EngineStep> steps;
  for (size_t i = 0; i < points.size(); ++i) {
    const std::string where = source + ": points[" + std::to_string(i) + "]";
    try {
      ASSIGN_OR_RETURN(EngineStep s, ParsePoint(points[i], where));
      steps.push_back(std::move(s));
    } catch (const std::exception& e) {  // a missing or mistyped field
      return InvalidArgument(where + ": " + e.what());
    }
  }
  return steps;
}

Result<EngineFit> FitEngineSteps(const std::vector<EngineStep>& steps,
                                 const HardwareProfile& profile, const EngineTraits& traits) {
  if (steps.empty()) return InvalidArgument("no engine steps to fit");
  ASSIGN_OR_RETURN(std::vector<double> floors,
                   StepsAt(steps, profile, traits, profile.memory_efficiency));
  std::vector<double> per_layer;
  for (size_t i = 0; i < steps.size(); ++i)
    per_layer.push_back(floors[i] / steps[i].shape.num_layers);
  const auto [lowest, highest] = std::minmax_element(per_layer.begin(), per_layer.end());
  EngineFit fit;
  fit.memory_efficiency = profile.memory_efficiency;
  fit.efficiency_fitted = *highest > 1.05 * *lowest;
  auto [layer, squares] = BestLayerTime(steps, floors);
  if (fit.efficiency_fitted) {
    // From the datasheet's 1.0 down: the first of equal errors (the highest efficiency) wins.
    for (int step = 0; step <= 180; ++step) {
      const double e = 1.0 - 0.005 * step;
      ASSIGN_OR_RETURN(std::vector<double> predicted, StepsAt(steps, profile, traits, e));
      const auto [l, sq] = BestLayerTime(steps, predicted);
      if (step == 0 || sq < squares - 1e-12) {
        fit.memory_efficiency = e;
        layer = l;
        squares = sq;
      }
    }
  }
  fit.layer_us = layer * 1e3;
  fit.rms_relative_error = std::sqrt(squares / static_cast<double>(steps.size()));
  return fit;
}

}  // namespace tpserve::planner
