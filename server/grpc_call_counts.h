// What gRPC itself sees of the server's calls, for /metrics, beside the service's own counters:
//  - every call the transport started, and how many ended OK or not (gRPC's channelz, all
//    methods), which includes calls gRPC refused or that were cancelled before any handler ran;
//  - the calls that reached a handler, by method (counted when gRPC creates a call's
//    interceptors, just before it runs the handler).
// started - handled = calls that never reached a handler.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <grpcpp/support/server_interceptor.h>

namespace tpserve {

class GrpcCallCounts {
 public:
  // Calls to any other method are counted as "other" (the method name is the client's to choose:
  // it must not become a label value).
  explicit GrpcCallCounts(std::vector<std::string> known_methods);

  // For ServerBuilder::experimental().SetInterceptorCreators; counts into this object, which
  // must outlive the server.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MakeInterceptorFactory();

  void CountHandled(const std::string& method);
  std::map<std::string, uint64_t> handled() const;
  std::string RenderPrometheus() const;

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> known_methods_;
  std::map<std::string, uint64_t> handled_;  // by full method name, or "other"
};

struct TransportCallCounts {
  uint64_t started = 0, succeeded = 0, failed = 0;
};
// Summed over this process's gRPC servers (channelz).
TransportCallCounts ReadTransportCallCounts();

}  // namespace tpserve
