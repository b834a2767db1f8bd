// The tpserve.v1.TpServe gRPC service on the callback (reactor) API. Generate validates the
// request (errors name the field and the numbers), hands it to the EngineLoop and streams the
// tokens back; cancellation, disconnects and deadlines cancel the sequence, which frees its KV
// blocks before the next step. No CUDA and no engine internals here.
#pragma once

#include <atomic>

#include "model/model_directory.h"
#include "server/access_control.h"
#include "server/engine_loop.h"
// gRPC's generated raw-method wrapper hides the typed Generate by design; clang warns where
// TpServeService instantiates it, at a line of the generated header.
#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Woverloaded-virtual"
#endif
#include "tpserve/v1/tpserve.grpc.pb.h"
#if defined(__clang__)
#pragma clang diagnostic pop
#endif

namespace tpserve {

struct ServiceLimits {
  int max_model_len = 0;        // prompt + max_tokens
  int max_request_id_bytes = 256;  // echoed once in the response and in the logs
  int max_stop_strings = 16;
  int max_stop_bytes = 256;
  int max_logprobs = 20;
  int max_prompt_token_ids = 1 << 20;
  size_t max_request_bytes = 1 << 20;  // a larger Generate request is RESOURCE_EXHAUSTED
  int max_new_tokens = 4096;           // a request's max_tokens cap (0: max_model_len only)
};

// Maps tpserve's Status to gRPC's (the codes share their numbers).
grpc::Status ToGrpcStatus(const Status& status);

// Generate is registered raw (bytes in, bytes out) so that the server, not protobuf, checks the
// request's size and UTF-8: every refusal then names its field and is counted. (gRPC's generated
// raw-method wrapper hides the typed Generate by design: see the include above.)
class TpServeService final : public v1::TpServe::WithRawCallbackMethod_Generate<v1::TpServe::CallbackService> {
 public:
  // `access`: the API key every call must carry (nullptr: none).
  TpServeService(const ModelDirectory* model, EngineLoop* loop, Engine* engine, ServerMetrics* metrics,
                 const EngineLoopOptions& loop_options, const ServiceLimits& limits,
                 const AccessControl* access = nullptr);

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* ModelInfo(grpc::CallbackServerContext* context,
                                      const v1::ModelInfoRequest* request,
                                      v1::ModelInfoResponse* response) override;
  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* context, const v1::StatsRequest* request,
                                  v1::StatsResponse* response) override;

  // Draining: new Generate calls fail with UNAVAILABLE; running ones finish.
  void StartDraining() { draining_ = true; }

  // Turns a request into what the engine loop runs, or says which field is wrong. The HTTP API's
  // requests come through here too.
  Result<ServeRequest> Validate(const v1::GenerateRequest& request) const;
  const ServiceLimits& limits() const { return limits_; }

 private:
  // UNAUTHENTICATED without the API key; UNAVAILABLE while draining or after an engine failure;
  // otherwise the request read and validated.
  Result<ServeRequest> Accept(grpc::CallbackServerContext* context, const grpc::ByteBuffer& wire) const;
  // The call's API key against the server's (Ok when none is configured).
  Status Authorize(grpc::CallbackServerContext* context) const;

  const ModelDirectory* model_;
  EngineLoop* loop_;
  Engine* engine_;
  ServerMetrics* metrics_;
  EngineLoopOptions loop_options_;
  ServiceLimits limits_;
  const AccessControl* access_;
  std::atomic<bool> draining_{false};
};

}  // namespace tpserve
