// The OpenAI-compatible HTTP API beside gRPC: GET /v1/models, POST /v1/completions and
// /v1/chat/completions (streamed as server-sent events or whole), GET /health. Requests are read
// into the gRPC request and go through the gRPC service's validation, the same engine loop and
// scheduler; a closed connection cancels its request (its KV blocks are freed before the next
// step). The same API key (Authorization: Bearer) and TLS certificate as gRPC.
//
// Thread model: cpp-httplib (the metrics endpoint's server) with one pool thread per open
// connection, sized by --http-threads. A streamed response holds its thread while it waits on the
// engine (a condition variable, woken per step), so N concurrent streams need N threads; they
// sleep between steps and cost a stack each. See docs/ARCHITECTURE.md for why not an event loop.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "common/status.h"
#include "model/chat/chat_template.h"
#include "model/model_directory.h"
#include "server/access_control.h"
#include "server/engine_loop.h"
#include "server/grpc_service.h"
#include "server/http/openai_request.h"

namespace httplib {
class Server;
class Request;
class Response;
}  // namespace httplib

namespace tpserve {

struct HttpApiOptions {
  std::string host = "127.0.0.1";
  int port = 0;                        // 0: pick a free one
  std::string served_model_name;       // the only name /v1 requests may ask for
  int threads = 512;                   // open connections served at once (streams included)
  int read_timeout_s = 10;             // a request that stalls this long while arriving is cut off
  int keepalive_timeout_s = 5;         // an idle keep-alive connection is closed after this long
  size_t max_request_bytes = 1 << 20;  // a larger body gets 413
  AccessOptions tls;                   // certificate files (the key file is read by AccessControl)
};

class HttpApi {
 public:
  // `chat`: the model's chat template (nullptr: /v1/chat/completions answers 400).
  // `metrics`: refusals are counted in tpserve_request_errors_total as gRPC's are (by status name).
  HttpApi(const ModelDirectory* model, const ChatTemplate* chat, EngineLoop* loop, const TpServeService* service,
          const AccessControl* access, ServerMetrics* metrics, HttpApiOptions options);
  ~HttpApi();

  // Binds and serves on a thread of its own; returns the port.
  Result<int> Start();
  // New /v1 requests get 503 and /health says so; running ones finish.
  void StartDraining() { draining_ = true; }
  void Stop();

 private:
  struct Stream;
  void Route();
  // 401 / 503 before a request is read, or Ok.
  Status Admit(const httplib::Request& request) const;
  void HandleGeneration(OpenAiEndpoint endpoint, const httplib::Request& request, httplib::Response& response);
  // A refused generation request: counted, and answered with OpenAI's error object.
  void Refuse(httplib::Response& response, const Status& status) const;
  // The chat messages rendered by the template and tokenized, into request->generate.
  Status RenderChat(OpenAiRequest* request) const;
  void Models(const httplib::Request& request, httplib::Response& response) const;
  void Health(httplib::Response& response) const;

  const ModelDirectory* model_;
  const ChatTemplate* chat_;
  EngineLoop* loop_;
  const TpServeService* service_;
  const AccessControl* access_;
  ServerMetrics* metrics_;
  HttpApiOptions options_;
  int64_t started_at_ = 0;  // unix seconds, the models' `created`
  std::atomic<bool> draining_{false};
  std::atomic<uint64_t> next_id_{0};
  std::unique_ptr<httplib::Server> server_;
  std::unique_ptr<std::thread> thread_;
};

}  // namespace tpserve
