#include "planner/engine_steps.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "common/json_int.h"
#include "model/model_directory.h"
#include "planner/serving_simulation.h"

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
  if (s.point.tp < 1) return InvalidArgument(where + ": tp: must be at least 1");
  const std::string dtype = p.value("dtype", std::string("bf16"));
  if (dtype != "bf16" && dtype != "fp16" && dtype != "fp8") {
    return InvalidArgument(where + ": dtype: \"" + dtype + "\" is not bf16, fp16 or fp8");
  }
  s.point.weight_bytes = dtype == "fp8" ? 1 : 2;
  const std::string mode = p.value("engine_mode", std::string("graphs"));
  if (mode != "graphs" && mode != "eager") {
    return InvalidArgument(where + ": engine_mode: \"" + mode + "\" is not graphs or eager");
  }
  s.eager = mode == "eager";
  if (p.contains("prompt_tokens")) {
    if (s.eager) return InvalidArgument(where + ": engine_mode: eager is for decode points (prefill runs eagerly anyway)");
    s.prompt_tokens = JsonInt<int>(p.at("prompt_tokens"), "prompt_tokens");
    if (s.prompt_tokens < 1) return InvalidArgument(where + ": prompt_tokens: must be at least 1");
    if (!p.contains("ttft_ms")) return InvalidArgument(where + ": a prefill point (prompt_tokens) needs ttft_ms");
    s.step_ms = p.at("ttft_ms").get<double>();
    if (!(s.step_ms > 0) || !std::isfinite(s.step_ms)) return InvalidArgument(where + ": ttft_ms: must be positive");
    return s;
  }
  s.point.batch = JsonInt<int>(p.at("batch"), "batch");
  s.point.context = JsonInt<int>(p.at("context"), "context");
  if (s.point.batch < 1) return InvalidArgument(where + ": batch: must be at least 1");
  if (s.point.context < 1) return InvalidArgument(where + ": context: must be at least 1");
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

namespace {

// The compute efficiency and half-rate row count (HardwareProfile::compute_half_rows) that best
// predict the prefill points on `profile`: least squares on relative error over a grid (the row
// count stays the profile's unless the points have two prompt lengths or more).
Status FitComputeRate(const std::vector<EngineStep>& prefills, HardwareProfile p, const EngineTraits& traits,
                      EngineFit* fit) {
  std::vector<StepShape> shapes;
  std::vector<int> lengths;
  for (const EngineStep& s : prefills) {
    shapes.push_back(PromptStepShape(s.prompt_tokens, s.point.tp, s.point.weight_bytes, p.attention_query_tile));
    lengths.push_back(s.prompt_tokens);
  }
  std::sort(lengths.begin(), lengths.end());
  const bool fit_rows = std::unique(lengths.begin(), lengths.end()) - lengths.begin() >= 2;
  double best = 1e300;
  for (int row_step = 0; row_step <= (fit_rows ? 128 : 0); ++row_step) {
    p.compute_half_rows = fit_rows ? 8.0 * row_step : p.compute_half_rows;
    for (int step = 0; step <= 230; ++step) {
      p.compute_efficiency = 1.2 - 0.005 * step;
      double squares = 0;
      for (size_t i = 0; i < prefills.size(); ++i) {
        auto time = PredictStepTime(prefills[i].shape, p, traits, shapes[i]);
        if (!time.ok()) return InvalidArgument(prefills[i].where + ": " + std::string(time.status().message()));
        squares += std::pow(time->step_ms / prefills[i].step_ms - 1, 2);
      }
      if (squares < best - 1e-12) {
        best = squares;
        fit->compute_efficiency = p.compute_efficiency;
        fit->compute_half_rows = p.compute_half_rows;
      }
    }
  }
  fit->prefill_rms_relative_error = std::sqrt(best / static_cast<double>(prefills.size()));
  return Status::Ok();
}

// The decode points' memory efficiency and per-layer time (EngineStep's header comment).
Status FitDecodeSteps(const std::vector<EngineStep>& steps, const HardwareProfile& profile,
                      const EngineTraits& traits, EngineFit* out) {
  ASSIGN_OR_RETURN(std::vector<double> floors,
                   StepsAt(steps, profile, traits, profile.memory_efficiency));
  std::vector<double> per_layer;
  for (size_t i = 0; i < steps.size(); ++i)
    per_layer.push_back(floors[i] / steps[i].shape.num_layers);
  const auto [lowest, highest] = std::minmax_element(per_layer.begin(), per_layer.end());
  EngineFit& fit = *out;
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
  return Status::Ok();
}

// The eager points' host time per layer (EngineStep::eager), on `p` as fitted so far.
Status FitLayerHostTime(const std::vector<EngineStep>& eager, HardwareProfile p, const EngineTraits& traits,
                        EngineFit* fit) {
  double best = 1e300;
  for (int step = 0; step <= 10000; ++step) {
    p.layer_host_us = 0.5 * step;
    double squares = 0;
    for (const EngineStep& s : eager) {
      auto d = PredictDecodeStep(s.shape, p, traits, s.point);
      if (!d.ok()) return InvalidArgument(s.where + ": " + std::string(d.status().message()));
      squares += std::pow(d->step_ms / s.step_ms - 1, 2);
    }
    if (squares < best - 1e-12) {
      best = squares;
      fit->layer_host_us = p.layer_host_us;
    }
  }
  fit->eager_rms_relative_error = std::sqrt(best / static_cast<double>(eager.size()));
  return Status::Ok();
}

}  // namespace

Result<EngineFit> FitEngineSteps(const std::vector<EngineStep>& all_steps,
                                 const HardwareProfile& profile, const EngineTraits& traits) {
  if (all_steps.empty()) return InvalidArgument("no engine steps to fit");
  std::vector<EngineStep> steps, prefills, eager;
  for (const EngineStep& s : all_steps) (s.prompt_tokens > 0 ? prefills : s.eager ? eager : steps).push_back(s);
  EngineFit fit;
  fit.decode_points = static_cast<int>(steps.size());
  fit.prefill_points = static_cast<int>(prefills.size());
  fit.eager_points = static_cast<int>(eager.size());
  fit.layer_host_us = profile.layer_host_us;
  fit.memory_efficiency = profile.memory_efficiency;
  fit.layer_us = profile.layer_us;
  fit.compute_efficiency = profile.compute_efficiency;
  fit.compute_half_rows = profile.compute_half_rows;
  if (!steps.empty()) RETURN_IF_ERROR(FitDecodeSteps(steps, profile, traits, &fit));
  if (!prefills.empty()) {
    HardwareProfile fitted = profile;
    fitted.memory_efficiency = fitted.attention_efficiency = fit.memory_efficiency;
    fitted.layer_us = fit.layer_us;
    RETURN_IF_ERROR(FitComputeRate(prefills, fitted, traits, &fit));
  }
  if (!eager.empty()) {
    HardwareProfile fitted = profile;
    fitted.memory_efficiency = fitted.attention_efficiency = fit.memory_efficiency;
    fitted.layer_us = fit.layer_us;
    fitted.compute_efficiency = fit.compute_efficiency;
    fitted.compute_half_rows = fit.compute_half_rows;
    RETURN_IF_ERROR(FitLayerHostTime(eager, fitted, traits, &fit));
  }
  return fit;
}

}  // namespace tpserve::planner
