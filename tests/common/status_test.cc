#include "common/status.h"

#include <gtest/gtest.h>

namespace tpserve {
namespace {

Result<int> ParsePositive(int value) {
  if (value <= 0) return InvalidArgument("value must be positive, got " + std::to_string(value));
  return value;
}

Result<int> Doubled(int value) {
  ASSIGN_OR_RETURN(int parsed, ParsePositive(value));
  return parsed * 2;
}

Status CheckBoth(int a, int b) {
  RETURN_IF_ERROR(ParsePositive(a).status());
  RETURN_IF_ERROR(ParsePositive(b).status().WithContext("b"));
  return Status::Ok();
}

TEST(Status, MacrosPropagateErrors) {
  EXPECT_EQ(Doubled(4).value(), 8);
  Result<int> bad = Doubled(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().ToString(), "INVALID_ARGUMENT: value must be positive, got -1");
  EXPECT_TRUE(CheckBoth(1, 2).ok());
  EXPECT_EQ(CheckBoth(1, 0).message(), "b: value must be positive, got 0");
}

}  // namespace
}  // namespace tpserve
