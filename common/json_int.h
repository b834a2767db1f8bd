// Integers read from outside JSON without undefined behaviour: nlohmann's get<int>() converts a
// float such as 1e71 with a static_cast (undefined, found by fuzzing) and silently truncates 2.5.
// JsonInt accepts only an integer that fits `Int`, else throws std::out_of_range naming `what`.
#pragma once

#include <nlohmann/json.hpp>

#include <limits>
#include <optional>
#include <stdexcept>
#include <string>

#include "common/bounded_json.h"

namespace tpserve {

// `value` as an `Int` when it is an integer that fits, else nullopt.
template <typename Int>
std::optional<Int> JsonIntIfFits(const nlohmann::json& value) {
  if (value.is_number_unsigned()) {
    const auto v = value.get<uint64_t>();
    if (v <= static_cast<uint64_t>(std::numeric_limits<Int>::max())) return static_cast<Int>(v);
  } else if (value.is_number_integer()) {
    const auto v = value.get<int64_t>();
    if (v >= static_cast<int64_t>(std::numeric_limits<Int>::min()) &&
        v <= static_cast<int64_t>(std::numeric_limits<Int>::max())) {
      return static_cast<Int>(v);
    }
  }
  return std::nullopt;
}

// "<what>: <value> is not an integer in [min, max]".
template <typename Int>
std::string JsonIntError(const nlohmann::json& value, const std::string& what) {
  return what + ": " + DescribeJsonForError(value) + " is not an integer in [" +
         std::to_string(std::numeric_limits<Int>::min()) + ", " +
         std::to_string(std::numeric_limits<Int>::max()) + "]";
}

template <typename Int>
Int JsonInt(const nlohmann::json& value, const std::string& what) {
  if (const std::optional<Int> v = JsonIntIfFits<Int>(value)) return *v;
  throw std::out_of_range(JsonIntError<Int>(value, what));
}

}  // namespace tpserve
