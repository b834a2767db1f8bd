#include "server/request_wire.h"

#include <string>

#include "text/tokenizer/utf8.h"
#include "tpserve/internal/generate_request_bytes.pb.h"

namespace tpserve {
Status CheckUtf8Field(std::string_view field, std::string_view value) {
  const size_t bad = FindInvalidUtf8(value);
  if (bad == std::string::npos) return Status::Ok();
  return InvalidArgument(std::string(field) + " is not valid UTF-8 (byte " + std::to_string(bad) + " of " +
                         std::to_string(value.size()) + ")");
}

Result<v1::GenerateRequest> ParseGenerateRequest(std::string_view wire, size_t max_bytes) {
  if (wire.size() > max_bytes) {
    return Status(StatusCode::kResourceExhausted, "request: " + std::to_string(wire.size()) +
                                                      " bytes, larger than the server's limit of " +
                                                      std::to_string(max_bytes));
  }
  internal::GenerateRequestBytes lenient;
  if (!lenient.ParseFromArray(wire.data(), static_cast<int>(wire.size()))) {
    return InvalidArgument("request: " + std::to_string(wire.size()) +
                           " bytes that are not a tpserve.v1.GenerateRequest message");
  }
  RETURN_IF_ERROR(CheckUtf8Field("request_id", lenient.request_id()));
  RETURN_IF_ERROR(CheckUtf8Field("prompt: text", lenient.text()));
  for (int i = 0; i < lenient.stop_size(); ++i) {
    RETURN_IF_ERROR(CheckUtf8Field("stop[" + std::to_string(i) + "]", lenient.stop(i)));
  }
  // Every string the lenient message knows is valid UTF-8 now, so the strict parse succeeds
  // unless a string field was added to tpserve.proto and not to the lenient message (a test
  // keeps the two in step).
  v1::GenerateRequest request;
  if (!request.ParseFromArray(wire.data(), static_cast<int>(wire.size()))) {
    return InvalidArgument("request: a string field holds invalid UTF-8");
  }
  return request;
}

}  // namespace tpserve
