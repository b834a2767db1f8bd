// The planner's readers of user files (tpserve plan calibrate): nccl-tests text output and
// bench-comm --json (the first byte picks one), then the α/β fit on whatever they accept: an error
// naming the file, never a crash; fits are finite.
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <string_view>

#include "planner/calibrate.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  tpserve::Result<tpserve::planner::CommSamples> samples = tpserve::Internal("unset");
  if (data[0] & 1) {
    const nlohmann::json value = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (value.is_discarded()) return 0;
    samples = tpserve::planner::ParseBenchCommJson(value, "fuzz.json");
  } else {
    samples = tpserve::planner::ParseNcclTestsOutput(text, "fuzz.txt");
  }
  if (!samples.ok()) {
    FUZZ_CHECK(samples.status().message().find("fuzz.") != std::string::npos, "an error that names no file");
    return 0;
  }
  auto fits = tpserve::planner::FitCollective(*samples);
  if (fits.ok()) {
    for (const auto& fit : *fits) FUZZ_CHECK(std::isfinite(fit.alpha_us) && std::isfinite(fit.beta_gb_s), "a non-finite fit");
  }
  return 0;
}
