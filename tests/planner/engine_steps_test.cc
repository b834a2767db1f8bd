// plan calibrate --engine-steps: an engine's memory efficiency and per-layer time recovered from
// step times made by hand (bytes from the models' published parameter counts, not from the
// planner), one point fitting the per-layer time alone, and errors that name the file, the point
// and the field.
#include "planner/engine_steps.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/model_directory.h"
#include "planner/calibrate.h"
#include "planner/serving_simulation.h"

namespace tpserve::planner {
namespace {

using ::testing::HasSubstr;

constexpr double kA100BytesPerS = 2039e9;  // a100-sxm's datasheet bandwidth

struct Shape {
  const char* name;
  double published_parameters;   // Meta's count: embeddings, layers, norms, LM head
  double hidden, layers, vocab;  // MHA: KV width = hidden
};
constexpr Shape kLlama2_7b{"llama-2-7b", 6738415616, 4096, 32, 32000};
constexpr Shape kLlama2_13b{"llama-2-13b", 13015864320, 5120, 40, 32000};

// A batch-1, TP=1 step in bf16 streaming at `efficiency` of the A100's bandwidth, plus `layer_ms`
// per layer: every parameter but the embedding table and the norms' is read once, and the KV cache.
double HandStepMs(const Shape& s, int context, double efficiency, double layer_ms) {
  const double streamed =
      s.published_parameters - s.vocab * s.hidden - (2 * s.layers + 1) * s.hidden;
  const double kv = s.layers * context * 2 * s.hidden;
  return (streamed + kv) * 2 / (kA100BytesPerS * efficiency) * 1e3 + s.layers * layer_ms;
}

nlohmann::json Point(const Shape& s, int context, double step_ms) {
  return {{"model", s.name},    {"tp", 1},         {"batch", 1},
          {"context", context}, {"dtype", "fp16"}, {"step_ms", step_ms}};
}

// Three steps of two models and two contexts made at 0.8 of the A100's bandwidth and 50 µs per layer.
nlohmann::json PointsAt80PercentAnd50Us() {
  return {Point(kLlama2_7b, 100, HandStepMs(kLlama2_7b, 100, 0.8, 0.05)),
          Point(kLlama2_13b, 100, HandStepMs(kLlama2_13b, 100, 0.8, 0.05)),
          Point(kLlama2_7b, 2000, HandStepMs(kLlama2_7b, 2000, 0.8, 0.05))};
}

// `points` parsed and fitted on the a100-sxm preset.
Result<EngineFit> FitOnA100(const nlohmann::json& points) {
  ASSIGN_OR_RETURN(const std::vector<EngineStep> steps, ParseEngineSteps({{"points", points}}, "steps.json"));
  ASSIGN_OR_RETURN(const HardwareProfile profile, LoadHardwareProfile("a100-sxm"));
  return FitEngineSteps(steps, profile, {});
}

TEST(EngineSteps, RecoverTheEfficiencyAndLayerTimeTheStepsWereMadeWith) {
  auto fit = FitOnA100(PointsAt80PercentAnd50Us());
  ASSERT_TRUE(fit.ok()) << fit.status().ToString();
  EXPECT_TRUE(fit->efficiency_fitted);
  EXPECT_NEAR(fit->memory_efficiency, 0.8, 0.0051);  // the grid's step
  EXPECT_NEAR(fit->layer_us, 50, 1.5);
  EXPECT_LT(fit->rms_relative_error, 0.005);
}

TEST(EngineSteps, OnePointFitsTheLayerTimeAndKeepsTheEfficiency) {
  const double step = HandStepMs(kLlama2_7b, 100, 1.0, 0.1);
  auto steps = ParseEngineSteps(nlohmann::json::array({Point(kLlama2_7b, 100, step)}), "one.json");
  ASSERT_TRUE(steps.ok()) << steps.status().ToString();
  auto profile = LoadHardwareProfile("a100-sxm");
  ASSERT_TRUE(profile.ok());
  auto fit = FitEngineSteps(*steps, *profile, {});
  ASSERT_TRUE(fit.ok());
  EXPECT_FALSE(fit->efficiency_fitted);
  EXPECT_DOUBLE_EQ(fit->memory_efficiency, 1.0);
  EXPECT_NEAR(fit->layer_us, 100, 0.6);
  // Faster than the floor: no negative per-layer time.
  steps->front().step_ms = step / 2;
  EXPECT_EQ(FitEngineSteps(*steps, *profile, {})->layer_us, 0);
}

// An engine without CUDA graphs whose host loop takes 600 µs per layer: its 7B and 13B steps are
// the host's (32 and 40 layers: 19.2 and 24 ms, above the GPU's ~10 and ~17 ms at 0.8 of the
// bandwidth); the graphs points beside them still fit the GPU's numbers alone.
TEST(EngineSteps, EagerPointsFitTheHostTimePerLayer) {
  nlohmann::json eager_7b = Point(kLlama2_7b, 100, 32 * 0.6), eager_13b = Point(kLlama2_13b, 100, 40 * 0.6);
  eager_7b["engine_mode"] = eager_13b["engine_mode"] = "eager";
  ASSERT_GT(32 * 0.6, HandStepMs(kLlama2_7b, 100, 0.8, 0.05));
  ASSERT_GT(40 * 0.6, HandStepMs(kLlama2_13b, 100, 0.8, 0.05));
  nlohmann::json points = PointsAt80PercentAnd50Us();
  points.push_back(eager_7b);
  points.push_back(eager_13b);
  auto fit = FitOnA100(points);
  ASSERT_TRUE(fit.ok()) << fit.status().ToString();
  EXPECT_EQ(fit->decode_points, 3);
  EXPECT_EQ(fit->eager_points, 2);
  EXPECT_NEAR(fit->memory_efficiency, 0.8, 0.0051);
  EXPECT_NEAR(fit->layer_us, 50, 1.5);
  EXPECT_NEAR(fit->layer_host_us, 600, 0.5);  // the grid's step
  EXPECT_LT(fit->eager_rms_relative_error, 0.001);
  // A mode that is neither, and an eager prefill point, are refused by name.
  eager_7b["engine_mode"] = "lazy";
  auto bad = ParseEngineSteps(nlohmann::json::array({eager_7b}), "bad.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("bad.json: points[0]: engine_mode: \"lazy\" is not graphs or eager"));
  bad = ParseEngineSteps(nlohmann::json::array({{{"model", "llama-2-7b"}, {"tp", 1}, {"prompt_tokens", 512},
                                                 {"ttft_ms", 40}, {"engine_mode", "eager"}}}),
                         "bad.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("points[0]: engine_mode: eager is for decode points"));
}

TEST(EngineSteps, PublishedUnitsAreReadAsStepTimes) {
  const nlohmann::json points = {{{"model", "llama-2-7b"},
                                  {"tp", 2},
                                  {"batch", 1},
                                  {"context", 50},
                                  {"unit", "tokens_per_s"},
                                  {"value", 40}},
                                 {{"model", "llama-2-7b"},
                                  {"tp", 1},
                                  {"batch", 4},
                                  {"context", 50},
                                  {"unit", "ms_per_token"},
                                  {"value", 12.5},
                                  {"dtype", "fp8"}}};
  auto steps = ParseEngineSteps(points, "units.json");
  ASSERT_TRUE(steps.ok()) << steps.status().ToString();
  EXPECT_DOUBLE_EQ((*steps)[0].step_ms, 25);
  EXPECT_EQ((*steps)[0].point.tp, 2);
  EXPECT_DOUBLE_EQ((*steps)[1].step_ms, 12.5);
  EXPECT_EQ((*steps)[1].point.weight_bytes, 1);
  EXPECT_EQ((*steps)[1].point.batch, 4);
}

TEST(EngineSteps, BadPointsNameTheFileThePointAndTheField) {
  const nlohmann::json good = Point(kLlama2_7b, 100, 10);
  auto error_of = [&](nlohmann::json bad) {
    auto steps = ParseEngineSteps({{"points", {good, bad}}}, "mine.json");
    return steps.ok() ? std::string("accepted") : std::string(steps.status().message());
  };
  nlohmann::json bad = good;
  bad["model"] = "llama-9-1t";
  EXPECT_THAT(error_of(bad), HasSubstr("mine.json: points[1]: model: "));
  bad = good;
  bad.erase("tp");
  EXPECT_THAT(error_of(bad), HasSubstr("mine.json: points[1]: "));
  bad = good;
  bad["batch"] = 0;
  EXPECT_THAT(error_of(bad), HasSubstr("points[1]: batch"));
  bad = good;
  bad["context"] = "long";
  EXPECT_THAT(error_of(bad), HasSubstr("points[1]: "));
  bad = good;
  bad["dtype"] = "int4";
  EXPECT_THAT(error_of(bad), HasSubstr("points[1]: dtype"));
  bad = good;
  bad.erase("step_ms");
  EXPECT_THAT(error_of(bad), HasSubstr("points[1]: needs step_ms"));
  bad["unit"] = "s_per_token";
  bad["value"] = 1;
  EXPECT_THAT(error_of(bad), HasSubstr("points[1]: unit"));
  bad = good;
  bad["step_ms"] = -1;
  EXPECT_THAT(error_of(bad), HasSubstr("points[1]: the step time must be positive"));
  EXPECT_FALSE(ParseEngineSteps(nlohmann::json::object(), "empty.json").ok());
}

TEST(EngineSteps, CalibrateWritesThemIntoTheBaseProfile) {
  const nlohmann::json points = {Point(kLlama2_7b, 100, HandStepMs(kLlama2_7b, 100, 0.7, 0.03)),
                                 Point(kLlama2_13b, 100, HandStepMs(kLlama2_13b, 100, 0.7, 0.03))};
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / "tpserve_engine_steps_test.json";
  std::ofstream(path) << nlohmann::json{{"points", points}}.dump();
  auto calibration =
      Calibrate({.engine_steps = {path.string()}, .base = "a100-sxm", .date = "2026-12-01"});
  auto both = Calibrate(
      {.bench_decode = {path.string()}, .engine_steps = {path.string()}, .base = "a100-sxm"});
  std::filesystem::remove(path);
  ASSERT_TRUE(calibration.ok()) << calibration.status().ToString();
  EXPECT_EQ(calibration->profile.name, "a100-sxm-calibrated");
  EXPECT_NEAR(calibration->profile.memory_efficiency, 0.7, 0.0051);
  EXPECT_NEAR(calibration->profile.attention_efficiency, 0.7, 0.0051);
  EXPECT_NEAR(calibration->profile.layer_us, 30, 1.5);
  EXPECT_THAT(calibration->profile.sources.at("overheads"),
              HasSubstr("tpserve_engine_steps_test.json"));
  ASSERT_FALSE(both.ok());
  EXPECT_THAT(both.status().message(), HasSubstr("give one"));
}

// Prefill points (the time to the first token of one prompt) made by the step model itself at a
// known compute efficiency and half-rate row count on the a100-sxm preset: the fit must find the
// two again on its grids, and calibrate writes them into the profile.
TEST(EngineSteps, PrefillPointsFitTheComputeEfficiencyAndItsRiseWithTheRows) {
  auto a100 = LoadHardwareProfile("a100-sxm");
  ASSERT_TRUE(a100.ok());
  HardwareProfile made = *a100;
  made.compute_efficiency = 0.6;
  made.compute_half_rows = 64;
  auto model = ResolveModelShape({.model = "llama-2-7b", .load_format = "dummy"});
  ASSERT_TRUE(model.ok());
  nlohmann::json points = nlohmann::json::array();
  for (int tokens : {32, 128, 512, 2048}) {
    auto step = PredictStepTime(*model, made, {}, PromptStepShape(tokens, 1, 2, made.attention_query_tile));
    ASSERT_TRUE(step.ok());
    points.push_back({{"model", "llama-2-7b"}, {"tp", 1}, {"dtype", "fp16"}, {"prompt_tokens", tokens},
                      {"ttft_ms", step->step_ms}});
  }
  auto steps = ParseEngineSteps({{"points", points}}, "prefill.json");
  ASSERT_TRUE(steps.ok()) << steps.status().ToString();
  auto fit = FitEngineSteps(*steps, *a100, {});
  ASSERT_TRUE(fit.ok()) << fit.status().ToString();
  EXPECT_EQ(fit->prefill_points, 4);
  EXPECT_EQ(fit->decode_points, 0);
  EXPECT_NEAR(fit->compute_efficiency, 0.6, 0.0051);
  EXPECT_NEAR(fit->compute_half_rows, 64, 8.01);
  EXPECT_LT(fit->prefill_rms_relative_error, 0.01);
  EXPECT_EQ(fit->memory_efficiency, a100->memory_efficiency);  // no decode points: kept

  const std::filesystem::path path = std::filesystem::temp_directory_path() / "tpserve_engine_prefill_test.json";
  std::ofstream(path) << nlohmann::json{{"points", points}}.dump();
  auto calibration = Calibrate({.engine_steps = {path.string()}, .base = "a100-sxm", .date = "2026-12-03"});
  std::filesystem::remove(path);
  ASSERT_TRUE(calibration.ok()) << calibration.status().ToString();
  EXPECT_NEAR(calibration->profile.compute_efficiency, 0.6, 0.0051);
  EXPECT_NEAR(calibration->profile.compute_half_rows, 64, 8.01);
  EXPECT_EQ(calibration->profile.layer_us, a100->layer_us);

  // A prefill point names what it lacks.
  nlohmann::json bad = points[0];
  bad.erase("ttft_ms");
  auto refused = ParseEngineSteps({{"points", {points[1], bad}}}, "prefill.json");
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("prefill.json: points[1]: a prefill point (prompt_tokens) needs ttft_ms"));
  bad["ttft_ms"] = 0;
  EXPECT_THAT(ParseEngineSteps({{"points", {bad}}}, "p.json").status().message(), HasSubstr("ttft_ms: must be positive"));
}

}  // namespace
}  // namespace tpserve::planner
