// `tpserve client`: sends one prompt to a tpserve server, streams the text to the terminal as it
// arrives and prints the timings; --json prints one object instead.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "clients/connection.h"
#include "clients/grpc_code_name.h"

#include <chrono>
#include <future>
#include <optional>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "tpserve/v1/tpserve.grpc.pb.h"

namespace tpserve {
namespace {

struct ClientOptions {
  std::string target = "127.0.0.1:50051";
  ConnectionOptions connection;
  std::string prompt;
  int max_tokens = 64;
  float temperature = 0;
  float top_p = 1;
  int top_k = 0;
  std::optional<uint64_t> seed;  // unset: the server draws one
  bool ignore_eos = false;
  std::vector<std::string> stop;
  double timeout_s = 0;
  bool json = false;
};

int Run(const ClientOptions& o) {
  auto connection = Connection::Open(o.target, o.connection);
  if (!connection.ok()) {
    spdlog::error("client: {}", connection.status().message());
    return 2;
  }
  auto stub = v1::TpServe::NewStub(connection->channel());
  v1::GenerateRequest request;
  request.set_text(o.prompt);
  request.set_max_tokens(o.max_tokens);
  request.set_ignore_eos(o.ignore_eos);
  request.mutable_sampling()->set_temperature(o.temperature);
  request.mutable_sampling()->set_top_p(o.top_p);
  request.mutable_sampling()->set_top_k(o.top_k);
  if (o.seed) request.mutable_sampling()->set_seed(*o.seed);
  for (const auto& s : o.stop) request.add_stop(s);

  grpc::ClientContext context;
  connection->Authorize(&context);
  if (o.timeout_s > 0) {
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::microseconds(static_cast<int64_t>(o.timeout_s * 1e6)));
  }
  const auto start = std::chrono::steady_clock::now();
  auto reader = stub->Generate(&context, request);
  v1::GenerateResponse response, last;
  std::string text;
  std::vector<int32_t> ids;
  double first_token_s = -1;
  while (reader->Read(&response)) {
    if (first_token_s < 0 && response.token_ids_size() > 0) {
      first_token_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    text += response.text();
    ids.insert(ids.end(), response.token_ids().begin(), response.token_ids().end());
    if (!o.json) {
      std::fputs(response.text().c_str(), stdout);
      std::fflush(stdout);
    }
    if (response.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) last = response;
  }
  const grpc::Status status = reader->Finish();
  if (!status.ok()) {
    if (!o.json) std::printf("\n");
    spdlog::error("client: {}: {}", GrpcCodeName(status.error_code()), status.error_message());
    return 1;
  }
  const double e2e = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const v1::Timing& t = last.timing();
  if (o.json) {
    nlohmann::json out = {{"text", text},
                          {"token_ids", ids},
                          {"finish_reason", v1::FinishReason_Name(last.finish_reason())},
                          {"prompt_tokens", last.prompt_tokens()},
                          {"completion_tokens", last.completion_tokens()},
                          {"client_ttft_s", first_token_s},
                          {"client_e2e_s", e2e},
                          {"server", {{"queue_s", t.queue_seconds()},
                                      {"ttft_s", t.time_to_first_token_seconds()},
                                      {"decode_s", t.decode_seconds()},
                                      {"e2e_s", t.e2e_seconds()},
                                      {"compute_s", t.compute_seconds()},
                                      {"comm_s", t.comm_seconds()},
                                      {"preemptions", t.preemptions()}}}};
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::fprintf(stderr,
                 "\n[%s: %d prompt + %d completion tokens; ttft %.1f ms, e2e %.1f ms; server: queue "
                 "%.1f ms, decode %.1f ms, compute %.1f ms, comm %.1f ms]\n",
                 v1::FinishReason_Name(last.finish_reason()).c_str(), last.prompt_tokens(),
                 last.completion_tokens(), first_token_s * 1e3, e2e * 1e3, t.queue_seconds() * 1e3,
                 t.decode_seconds() * 1e3, t.compute_seconds() * 1e3, t.comm_seconds() * 1e3);
  }
  return 0;
}

}  // namespace

// `tpserve health`: grpc.health.v1 Check, for probes and HEALTHCHECKs that must speak TLS.
int RunHealth(const std::string& target, const ConnectionOptions& options, double timeout_s) {
  auto connection = Connection::Open(target, options);
  if (!connection.ok()) {
    spdlog::error("health: {}", connection.status().message());
    return 2;
  }
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1e3)));
  grpc::Slice empty;  // HealthCheckRequest{service: ""} is empty on the wire
  grpc::ByteBuffer request_bytes(&empty, 1), response_bytes;
  grpc::GenericStub stub(connection->channel());
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request_bytes, &response_bytes,
                 [&](grpc::Status s) { done.set_value(std::move(s)); });
  const grpc::Status status = done.get_future().get();
  if (!status.ok()) {
    std::printf("UNREACHABLE %s: %s\n", GrpcCodeName(status.error_code()).c_str(), status.error_message().c_str());
    return 1;
  }
  // HealthCheckResponse: field 1 (status, varint): 1 SERVING, 2 NOT_SERVING.
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (response_bytes.Dump(&slices).ok()) {
    for (const grpc::Slice& slice : slices) bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  const int serving = bytes.size() >= 2 && bytes[0] == 0x08 ? bytes[1] : 0;
  std::printf("%s\n", serving == 1 ? "SERVING" : serving == 2 ? "NOT_SERVING" : "UNKNOWN");
  return serving == 1 ? 0 : 1;
}

void AddHealthCommand(CLI::App& app, CommandAction* action) {
  struct HealthOptions {
    std::string target = "127.0.0.1:50051";
    ConnectionOptions connection;
    double timeout_s = 5;
  };
  auto o = std::make_shared<HealthOptions>();
  CLI::App* cmd = app.add_subcommand(
      "health", "Ask a server's grpc.health.v1 whether it serves (for probes and HEALTHCHECKs, TLS included):\n"
                "prints SERVING (exit 0), NOT_SERVING or UNREACHABLE (exit 1).");
  cmd->add_option("--target", o->target, "Server address host:port")->capture_default_str();
  AddConnectionFlags(cmd, &o->connection);
  cmd->add_option("--timeout", o->timeout_s, "Seconds to wait for the answer")->capture_default_str();
  cmd->callback([o, action] { *action = [o] { return RunHealth(o->target, o->connection, o->timeout_s); }; });
}

void AddClientCommand(CLI::App& app, CommandAction* action) {
  auto o = std::make_shared<ClientOptions>();
  CLI::App* cmd = app.add_subcommand("client", "Send a prompt to a tpserve server and stream the completion.");
  cmd->add_option("--target", o->target, "Server address host:port")->capture_default_str();
  AddConnectionFlags(cmd, &o->connection);
  cmd->add_option("--prompt", o->prompt, "Prompt text")->required();
  cmd->add_option("--max-tokens", o->max_tokens, "Tokens to generate")->capture_default_str();
  cmd->add_option("--temperature", o->temperature, "0: greedy")->capture_default_str();
  cmd->add_option("--top-p", o->top_p, "Nucleus mass in (0, 1]")->capture_default_str();
  cmd->add_option("--top-k", o->top_k, "0: off")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Sampling seed (default: the server draws one per request)");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Generate exactly --max-tokens tokens");
  cmd->add_option("--stop", o->stop, "Stop string (repeatable)");
  cmd->add_option("--timeout", o->timeout_s, "Deadline in seconds (0: none)");
  cmd->add_flag("--json", o->json, "Print one JSON object");
  cmd->callback([o, action] { *action = [o] { return Run(*o); }; });
}

}  // namespace tpserve
