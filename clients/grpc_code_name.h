// gRPC's canonical name of a status code ("UNAVAILABLE"), as grpcurl and the gRPC docs print it.
#pragma once

#include <grpcpp/support/status.h>

#include <string>

namespace tpserve {

inline std::string GrpcCodeName(grpc::StatusCode code) {
  static const char* kNames[] = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
                                 "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
                                 "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
                                 "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
  const int value = static_cast<int>(code);
  return value >= 0 && value <= 16 ? kNames[value] : std::to_string(value);
}

}  // namespace tpserve
