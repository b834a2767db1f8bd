#include "clients/grpc_load_target.h"

#include <chrono>

#include "clients/grpc_code_name.h"

namespace tpserve {

v1::GenerateRequest ToGenerateRequest(const LoadRequest& load) {
  v1::GenerateRequest request;
  request.set_request_id(load.id);
  if (load.prompt_ids.empty()) {
    request.set_text(load.prompt_text);
  } else {
    request.mutable_token_ids()->mutable_ids()->Assign(load.prompt_ids.begin(), load.prompt_ids.end());
  }
  request.set_max_tokens(load.output_tokens);
  request.set_min_tokens(load.output_tokens);
  request.set_ignore_eos(true);
  if (load.sampling.temperature > 0) {
    v1::SamplingParams* sampling = request.mutable_sampling();
    sampling->set_temperature(load.sampling.temperature);
    sampling->set_top_p(load.sampling.top_p);
    sampling->set_top_k(load.sampling.top_k);
    sampling->set_seed(load.seed);
  }
  return request;
}

Result<std::unique_ptr<GrpcLoadTarget>> GrpcLoadTarget::Open(const std::string& server,
                                                             const ConnectionOptions& options) {
  ASSIGN_OR_RETURN(Connection connection, Connection::Open(server, options));
  auto stub = v1::TpServe::NewStub(connection.channel());
  std::unique_ptr<GrpcLoadTarget> target(new GrpcLoadTarget(std::move(connection), std::move(stub)));
  grpc::ClientContext context;
  target->connection_.Authorize(&context);
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  const grpc::Status status = target->stub_->ModelInfo(&context, v1::ModelInfoRequest(), &target->info_);
  if (!status.ok()) {
    return Status(StatusCode::kUnavailable, "cannot reach " + server + ": " + status.error_message());
  }
  return target;
}

RequestRecord GrpcLoadTarget::Send(const LoadRequest& load) {
  const v1::GenerateRequest request = ToGenerateRequest(load);
  grpc::ClientContext context;
  connection_.Authorize(&context);
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(static_cast<int64_t>(kLoadRequestTimeoutS * 1e3)));
  StreamTimer timer;
  auto reader = stub_->Generate(&context, request);
  v1::GenerateResponse response;
  while (reader->Read(&response)) {
    if (response.token_ids_size() > 0) timer.Arrived(response.token_ids_size());
  }
  const grpc::Status status = reader->Finish();
  return timer.Finish(status.ok() ? std::string() : GrpcCodeName(status.error_code()));
}

}  // namespace tpserve
