// loadgen's target over the OpenAI-compatible HTTP API (tpserve's --http-port, vLLM, SGLang):
// each request a streamed POST read as server-sent events, over a connection of its own (a pool
// of keep-alive clients, one per request in flight). TTFT and inter-token gaps come from the
// chunks that carry text; the output token count from the final usage chunk when the server
// sends one, else one per text chunk.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "clients/connection.h"
#include "clients/load_target.h"
#include "clients/openai_wire.h"

namespace httplib {
class Client;
}

namespace tpserve {

struct OpenAiTargetOptions {
  std::string url;    // http(s)://HOST:PORT[/prefix]
  std::string model;  // empty: the first of GET /v1/models
  OpenAiRoute route = OpenAiRoute::kCompletions;
  ConnectionOptions connection;  // the API key as Authorization: Bearer; TLS files for https://
};

class OpenAiLoadTarget : public LoadTarget {
 public:
  // Reads the key and certificate files; asks GET /v1/models when no model is named.
  static Result<std::unique_ptr<OpenAiLoadTarget>> Open(const OpenAiTargetOptions& options);
  ~OpenAiLoadTarget() override;

  const std::string& model() const { return model_; }
  RequestRecord Send(const LoadRequest& request) override;

 private:
  OpenAiLoadTarget() = default;
  std::unique_ptr<httplib::Client> NewClient() const;
  // A connection for one request: an idle one, or a new one.
  // One attempt on `client`; nullopt when `retry_if_stale` and the connection failed before any
  // byte of the response (a kept-alive connection the server had closed).
  std::optional<RequestRecord> SendOn(httplib::Client& client, const LoadRequest& load, bool retry_if_stale);
  // A pooled keep-alive connection (`*reused` true) or a new one.
  std::unique_ptr<httplib::Client> Acquire(bool* reused);
  void Release(std::unique_ptr<httplib::Client> client);

  OpenAiServerUrl url_;
  OpenAiRoute route_ = OpenAiRoute::kCompletions;
  ConnectionOptions tls_;
  std::string bearer_;  // "Bearer KEY", or empty
  std::string model_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<httplib::Client>> idle_;
};

}  // namespace tpserve
