// Reads a Generate request from its wire bytes. Strings are checked for UTF-8 by the server, not
// by protobuf, so a bad one is refused as INVALID_ARGUMENT naming the field and the byte
// (protobuf's own refusal has no detail, logs an ERROR line and reaches the client as
// UNIMPLEMENTED), and the size limit is the server's, so that every refusal is counted.
#pragma once

#include <string_view>

#include "common/status.h"
#include "tpserve/v1/tpserve.pb.h"

namespace tpserve {

// `max_bytes`: the largest request accepted (RESOURCE_EXHAUSTED beyond).
Result<v1::GenerateRequest> ParseGenerateRequest(std::string_view wire, size_t max_bytes);

// INVALID_ARGUMENT "FIELD is not valid UTF-8 (byte N of M)" unless `value` is well-formed UTF-8.
Status CheckUtf8Field(std::string_view field, std::string_view value);

}  // namespace tpserve
