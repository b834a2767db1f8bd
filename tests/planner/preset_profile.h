// A bundled hardware profile for the planner tests; fails the test if it does not load.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "planner/hardware_profile.h"

namespace tpserve::planner {

inline HardwareProfile Preset(const std::string& name) {
  auto profile = LoadHardwareProfile(name);
  EXPECT_TRUE(profile.ok()) << profile.status().ToString();
  return profile.ok() ? *profile : HardwareProfile{};
}

}  // namespace tpserve::planner
