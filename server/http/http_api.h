// The OpenAI-compatible HTTP API beside gRPC: GET /v1/models, POST /v1/completions and
// /v1/chat/completions (streamed as server-sent events or whole), GET /health. Requests are read
// into the gRPC request and go through the gRPC service's validation, the same engine loop and
// scheduler; a closed connection cancels its request (its KV blocks are freed before the next
// step). The same API key (Authorization: Bearer) and TLS certificate as gRPC.
//
// Thread model: HttpServer's event loop (a few threads, --http-threads) reads every connection's
// requests and writes every response; a /v1 request's key is checked from its head, before its
// body is read. A generation's output is pushed from the engine thread (HttpGeneration) and
// written by the event loop as it comes, so an open stream holds no thread. See
// docs/ARCHITECTURE.md for the choice of Boost.Beast.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "text/chat/chat_template.h"
#include "model/model_directory.h"
#include "server/access_control.h"
#include "server/engine_loop.h"
#include "server/grpc_service.h"
#include "server/http/http_server.h"
#include "server/http/openai_request.h"

namespace tpserve {

struct HttpApiOptions {
  std::string host = "127.0.0.1";
  int port = 0;                        // 0: pick a free one
  std::string served_model_name;       // the only name /v1 requests may ask for
  int threads = 2;                     // event-loop threads (connections are not bound to threads)
  int max_connections = 8192;          // open connections at most; more are closed as they come
  int read_timeout_s = 10;             // a request must arrive whole within this; each write finish
  int keepalive_timeout_s = 5;         // an idle keep-alive connection is closed after this long
  size_t max_request_bytes = 1 << 20;  // a larger body gets 413, however it is framed
  AccessOptions tls;                   // certificate files (the key file is read by AccessControl)
  // CORS (--allowed-origins): origins whose browser pages may call the API, "*" for any; empty: off
  // (no Access-Control-* header is sent and OPTIONS is 404, as without CORS support).
  std::vector<std::string> allowed_origins;
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
  // Requests admitted and not yet handed to the engine loop: bodies being read, or being parsed,
  // rendered and tokenized (the drain waits for them as for the engine's).
  int requests_in_progress() const { return server_ ? server_->requests_in_progress() : 0; }
  void Stop();

 private:
  struct Stream;
  // From the request's head: 404 for no such endpoint; for /v1, 401 / 503 (counted). The body of a
  // refused request is never read.
  std::optional<HttpResponse> AdmitHead(const HttpRequest& head) const;
  // 401 / 503, or Ok.
  Status Admit(const HttpRequest& head) const;
  HttpResponse Handle(const HttpRequest& request);
  HttpResponse HandleGeneration(OpenAiEndpoint endpoint, const HttpRequest& request);
  // A refused generation request: counted, and answered with OpenAI's error object.
  HttpResponse Refuse(const Status& status) const;
  // The chat messages rendered by the template and tokenized, into request->generate.
  Status RenderChat(OpenAiRequest* request) const;
  HttpResponse Models(const HttpRequest& request) const;
  // CORS: the answer to a preflight (OPTIONS), and the headers every response to an allowed
  // Origin carries.
  HttpResponse Preflight(const HttpRequest& head) const;
  void AddCorsHeaders(const HttpRequest& request, HttpResponse* response) const;
  bool OriginAllowed(const std::string& origin) const;
  // 404 naming the model asked for (cut short) and the one served.
  Status ModelNotServed(const std::string& name) const;
  HttpResponse Health() const;

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
  std::unique_ptr<HttpServer> server_;
};

}  // namespace tpserve
