// A Generate request off the wire (what any client can send) through the server's own path: the
// raw bytes parsed with the server's size and UTF-8 checks (server/request_wire.h), then
// TpServeService::Validate against the tiny model: a refusal is INVALID_ARGUMENT or
// RESOURCE_EXHAUSTED naming a field, never a crash; an accepted request fits the limits.
#include <cstdint>
#include <string_view>

#include "server/grpc_service.h"
#include "server/request_wire.h"
#include "tests/fuzz/fuzz_tiny_model.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

constexpr size_t kMaxRequestBytes = 1 << 16;

const tpserve::TpServeService& Service() {
  static tpserve::EngineLoopOptions loop_options;
  static tpserve::ServiceLimits limits{.max_model_len = 2048, .max_request_bytes = kMaxRequestBytes};
  static tpserve::TpServeService service(&tpserve::FuzzTinyModel(), nullptr, nullptr, nullptr, loop_options, limits);
  return service;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const tpserve::TpServeService& service = Service();
  auto request = tpserve::ParseGenerateRequest({reinterpret_cast<const char*>(data), size}, kMaxRequestBytes);
  if (!request.ok()) {
    const tpserve::StatusCode code = request.status().code();
    FUZZ_CHECK(code == tpserve::StatusCode::kInvalidArgument || code == tpserve::StatusCode::kResourceExhausted,
               "a parse refusal with an unexpected code");
    return 0;
  }
  auto accepted = service.Validate(*request);
  if (!accepted.ok()) {
    FUZZ_CHECK(accepted.status().code() == tpserve::StatusCode::kInvalidArgument ||
                   accepted.status().code() == tpserve::StatusCode::kResourceExhausted ||
                   accepted.status().code() == tpserve::StatusCode::kOutOfRange,
               "a validation refusal with an unexpected code");
    FUZZ_CHECK(!accepted.status().message().empty(), "a refusal without a message");
    return 0;
  }
  FUZZ_CHECK(!accepted->prompt.empty(), "an accepted request without a prompt");
  FUZZ_CHECK(accepted->prompt.size() + static_cast<size_t>(accepted->max_tokens) <= 2048, "over max_model_len");
  for (int32_t id : accepted->prompt) FUZZ_CHECK(id >= 0 && id < 128256, "a prompt id outside the vocabulary");
  return 0;
}
