// The step plan a follower receives from the network (engine/step/step_plan_wire.h) on arbitrary bytes:
// an error, never a crash or a huge allocation; an accepted plan encodes back to bytes that decode
// to the same plan.
#include <cstdint>
#include <vector>

#include "engine/step/step_plan_wire.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto plan = tpserve::DecodeStepPlan({data, size});
  if (!plan.ok()) return 0;
  std::vector<uint8_t> encoded;
  tpserve::EncodeStepPlan(*plan, &encoded);
  auto again = tpserve::DecodeStepPlan(encoded);
  FUZZ_CHECK(again.ok(), "a re-encoded plan does not decode");
  std::vector<uint8_t> twice;
  tpserve::EncodeStepPlan(*again, &twice);
  FUZZ_CHECK(twice == encoded, "encode(decode(encode(plan))) differs");
  return 0;
}
