// Issue 33: the presets' default engine calibration (planner/calibrations/engines.json).
#include "planner/engine_calibration.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace tpserve::planner {
namespace {

using ::testing::HasSubstr;

TEST(EngineCalibration, EveryPresetHasADefaultThatReplacesItsFloor) {
  for (const std::string& name : HardwareProfileNames()) {
    auto floor = LoadHardwareProfile(name);
    ASSERT_TRUE(floor.ok()) << name;
    HardwareProfile calibrated = *floor;
    auto line = ApplyEngineCalibration({.calibration = "default"}, &calibrated);
    ASSERT_TRUE(line.ok()) << name << ": " << line.status().ToString();
    EXPECT_THAT(*line, HasSubstr("default engine calibration for " + name)) << "a preset without a default";
    EXPECT_EQ(calibrated.calibration, *line);
    // What engines achieve is below the datasheet: some per-layer time or a lower efficiency.
    EXPECT_TRUE(calibrated.layer_us > 0 || calibrated.memory_efficiency < 1 || calibrated.compute_efficiency < 1)
        << name;
    EXPECT_LE(calibrated.compute_efficiency, 1.0) << name;
    EXPECT_EQ(calibrated.memory_efficiency, calibrated.attention_efficiency) << name;
    // none keeps the floor.
    HardwareProfile kept = *floor;
    ASSERT_TRUE(ApplyEngineCalibration({.calibration = "none"}, &kept).ok());
    EXPECT_EQ(kept.layer_us, floor->layer_us);
    EXPECT_EQ(kept.compute_efficiency, floor->compute_efficiency);
    EXPECT_THAT(kept.calibration, HasSubstr("floor"));
  }
}

TEST(EngineCalibration, AFileCalibratesTheGpusItNamesAndBadOnesAreNamed) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() / "tpserve_engine_calibration_test.json";
  std::ofstream(path) << R"({"profiles": {"h100-sxm": {"efficiency": {"memory": 0.8, "compute": 0.5,
      "compute_half_rows": 64}, "overheads": {"layer_us": 40}, "fitted_on": "my runs"}}})";
  auto h100 = LoadHardwareProfile("h100-sxm");
  ASSERT_TRUE(h100.ok());
  auto line = ApplyEngineCalibration({.calibration = path.string()}, &*h100);
  ASSERT_TRUE(line.ok()) << line.status().ToString();
  EXPECT_THAT(*line, HasSubstr("my runs"));
  EXPECT_EQ(h100->memory_efficiency, 0.8);
  EXPECT_EQ(h100->attention_efficiency, 0.8);
  EXPECT_EQ(h100->compute_efficiency, 0.5);
  EXPECT_EQ(h100->compute_half_rows, 64);
  EXPECT_EQ(h100->layer_us, 40);
  auto a10 = LoadHardwareProfile("a10-pcie");
  ASSERT_TRUE(a10.ok());
  const double layer_us = a10->layer_us;
  auto other = ApplyEngineCalibration({.calibration = path.string()}, &*a10);
  ASSERT_TRUE(other.ok());
  EXPECT_THAT(*other, HasSubstr("has no entry for a10-pcie"));
  EXPECT_EQ(a10->layer_us, layer_us);
  std::ofstream(path) << R"({"profiles": {"h100-sxm": {"efficiency": {"memory": 7, "compute": 0.5,
      "compute_half_rows": 64}, "overheads": {"layer_us": 40}}}})";
  auto bad = ApplyEngineCalibration({.calibration = path.string()}, &*h100);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("profiles.h100-sxm.efficiency.memory"));
  std::ofstream(path) << R"({"profiles": {"h100-sxm": {"efficiency": {"memory": 0.8, "compute": 0.5,
      "compute_half_rows": 64}, "overheads": {"layer_us": 40}, "fitted_on": 5}}})";
  bad = ApplyEngineCalibration({.calibration = path.string()}, &*h100);
  std::filesystem::remove(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("profiles.h100-sxm.fitted_on: must be a string"));
  EXPECT_FALSE(ApplyEngineCalibration({.calibration = "/nonexistent/calibration.json"}, &*h100).ok());
}

TEST(EngineCalibration, AnEagerEngineTakesTheCalibrationsHostTimePerLayer) {
  auto floor = LoadHardwareProfile("a100-sxm");
  ASSERT_TRUE(floor.ok());
  // The default has an eager entry; graphs (the default mode) leaves the host time at 0.
  HardwareProfile graphs = *floor, eager = *floor;
  ASSERT_TRUE(ApplyEngineCalibration({.calibration = "default"}, &graphs).ok());
  EXPECT_EQ(graphs.layer_host_us, 0);
  auto line = ApplyEngineCalibration({.calibration = "default", .engine_mode = "eager"}, &eager);
  ASSERT_TRUE(line.ok()) << line.status().ToString();
  EXPECT_GT(eager.layer_host_us, 0);
  EXPECT_THAT(*line, HasSubstr("eager engine"));
  EXPECT_EQ(eager.layer_us, graphs.layer_us);  // the GPU's own numbers stay the graphs engines'
  EXPECT_EQ(eager.memory_efficiency, graphs.memory_efficiency);

  const std::filesystem::path path = std::filesystem::temp_directory_path() / "tpserve_engine_calibration_eager.json";
  const std::string profiles = R"("profiles": {"a100-sxm": {"efficiency": {"memory": 0.8, "compute": 0.5,
      "compute_half_rows": 64}, "overheads": {"layer_us": 40}}})";
  std::ofstream(path) << "{" << profiles << R"(, "eager": {"layer_host_us": 250, "fitted_on": "my eager runs"}})";
  HardwareProfile mine = *floor;
  line = ApplyEngineCalibration({.calibration = path.string(), .engine_mode = "eager"}, &mine);
  ASSERT_TRUE(line.ok()) << line.status().ToString();
  EXPECT_EQ(mine.layer_host_us, 250);
  EXPECT_THAT(*line, HasSubstr("250 us of host time per layer: my eager runs"));
  // Refused, by name: a file without an eager entry, the floor, a bad host time, a mode.
  std::ofstream(path) << "{" << profiles << "}";
  HardwareProfile other = *floor;
  auto bad = ApplyEngineCalibration({.calibration = path.string(), .engine_mode = "eager"}, &other);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("--engine-mode eager: " + path.string() + " has no \"eager\" entry"));
  EXPECT_TRUE(ApplyEngineCalibration({.calibration = path.string()}, &other).ok());
  bad = ApplyEngineCalibration({.calibration = "none", .engine_mode = "eager"}, &other);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("--engine-mode eager needs an engine calibration"));
  std::ofstream(path) << "{" << profiles << R"(, "eager": {"layer_host_us": -3}})";
  bad = ApplyEngineCalibration({.calibration = path.string(), .engine_mode = "eager"}, &other);
  std::filesystem::remove(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("eager.layer_host_us"));
  bad = ApplyEngineCalibration({.calibration = "default", .engine_mode = "lazy"}, &other);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("\"lazy\" is not graphs or eager"));
}

}  // namespace
}  // namespace tpserve::planner
