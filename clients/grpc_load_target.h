// loadgen's target over tpserve's gRPC API: one Generate stream per request on a shared channel;
// each streamed message's token ids are its output tokens.
#pragma once

#include <memory>
#include <string>

#include "clients/connection.h"
#include "clients/load_target.h"
#include "tpserve/v1/tpserve.grpc.pb.h"

namespace tpserve {

// The Generate request that a load request is sent as (greedy unless it has a temperature).
v1::GenerateRequest ToGenerateRequest(const LoadRequest& load);

class GrpcLoadTarget : public LoadTarget {
 public:
  // Connects and asks ModelInfo (the vocabulary random prompts draw from).
  static Result<std::unique_ptr<GrpcLoadTarget>> Open(const std::string& server, const ConnectionOptions& options);

  int vocab_size() const { return info_.vocab_size(); }
  RequestRecord Send(const LoadRequest& request) override;

 private:
  GrpcLoadTarget(Connection connection, std::unique_ptr<v1::TpServe::Stub> stub)
      : connection_(std::move(connection)), stub_(std::move(stub)) {}

  Connection connection_;
  std::unique_ptr<v1::TpServe::Stub> stub_;
  v1::ModelInfoResponse info_;
};

}  // namespace tpserve
