#include "clients/openai_load_target.h"

#include <httplib.h>

#include <algorithm>
#include <optional>

#include "clients/sse_parser.h"

namespace tpserve {
namespace {

constexpr size_t kMaxErrorBodyBytes = 64 << 10;

// "HTTP 404: model: 'x' is not served here"
std::string HttpFailure(int status, std::string_view body) {
  return "HTTP " + std::to_string(status) + ": " + OpenAiErrorMessage(body);
}

}  // namespace

OpenAiLoadTarget::~OpenAiLoadTarget() = default;

Result<std::unique_ptr<OpenAiLoadTarget>> OpenAiLoadTarget::Open(const OpenAiTargetOptions& options) {
  std::unique_ptr<OpenAiLoadTarget> target(new OpenAiLoadTarget());
  ASSIGN_OR_RETURN(target->url_, ParseOpenAiServerUrl(options.url));
  target->route_ = options.route;
  const ConnectionOptions& c = options.connection;
  if (!c.api_key_file.empty()) {
    ASSIGN_OR_RETURN(std::string key, ReadApiKeyFile(c.api_key_file));
    target->bearer_ = "Bearer " + key;
  }
  if (c.tls_cert.empty() != c.tls_key.empty()) return InvalidArgument("--tls-cert and --tls-key go together");
  if (!target->url_.tls && (!c.tls_ca.empty() || !c.tls_cert.empty())) {
    return InvalidArgument("--tls-ca / --tls-cert: the --server URL is http://; TLS needs https://");
  }
  // Read once here so that a missing file is named now, not as a failed connection per request.
  for (const auto& [flag, path] : {std::pair{"--tls-ca", c.tls_ca}, {"--tls-cert", c.tls_cert}, {"--tls-key", c.tls_key}}) {
    if (!path.empty()) RETURN_IF_ERROR(ReadSecretFile(flag, path).status());
  }
  target->tls_ = c;
  target->model_ = options.model;
  if (target->model_.empty()) {
    auto client = target->NewClient();
    httplib::Headers headers;
    if (!target->bearer_.empty()) headers.emplace("Authorization", target->bearer_);
    const httplib::Result models = client->Get(target->url_.prefix + "/v1/models", headers);
    if (!models) {
      return Status(StatusCode::kUnavailable,
                    "cannot reach " + options.url + ": " + httplib::to_string(models.error()));
    }
    if (models->status != 200) {
      return Status(StatusCode::kUnavailable, "GET /v1/models: " + HttpFailure(models->status, models->body));
    }
    ASSIGN_OR_RETURN(target->model_, FirstModelId(models->body));
  }
  return target;
}

std::unique_ptr<httplib::Client> OpenAiLoadTarget::NewClient() const {
  auto client = tls_.tls_cert.empty() ? std::make_unique<httplib::Client>(url_.origin)
                                      : std::make_unique<httplib::Client>(url_.origin, tls_.tls_cert, tls_.tls_key);
  if (!tls_.tls_ca.empty()) client->set_ca_cert_path(tls_.tls_ca);
  client->set_keep_alive(true);
  client->set_tcp_nodelay(true);
  client->set_connection_timeout(10);
  client->set_read_timeout(static_cast<time_t>(kLoadRequestTimeoutS));
  client->set_write_timeout(60);
  return client;
}

std::unique_ptr<httplib::Client> OpenAiLoadTarget::Acquire(bool* reused) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!idle_.empty()) {
      auto client = std::move(idle_.back());
      idle_.pop_back();
      *reused = true;
      return client;
    }
  }
  *reused = false;
  return NewClient();
}

void OpenAiLoadTarget::Release(std::unique_ptr<httplib::Client> client) {
  std::lock_guard<std::mutex> lock(mutex_);
  idle_.push_back(std::move(client));
}

RequestRecord OpenAiLoadTarget::Send(const LoadRequest& load) {
  bool reused = false;
  std::unique_ptr<httplib::Client> client = Acquire(&reused);
  // A kept-alive connection the server closed while it sat in the pool fails before any byte of
  // the response (the race every HTTP client has): then the request goes once more on a new
  // connection, as browsers and urllib3 do. Nothing was generated for it.
  for (;;) {
    std::optional<RequestRecord> record = SendOn(*client, load, /*retry_if_stale=*/reused);
    if (record) {
      Release(std::move(client));
      return std::move(record).value();
    }
    client = NewClient();
    reused = false;
  }
}

std::optional<RequestRecord> OpenAiLoadTarget::SendOn(httplib::Client& client, const LoadRequest& load,
                                                      bool retry_if_stale) {
  httplib::Request request;
  request.method = "POST";
  request.path = url_.prefix + (route_ == OpenAiRoute::kCompletions ? "/v1/completions" : "/v1/chat/completions");
  request.body = OpenAiRequestBody(route_, model_, load);
  request.set_header("Content-Type", "application/json");
  request.set_header("Accept", "text/event-stream");
  request.set_header("Accept-Encoding", "identity");  // each event as it is sent, never a compressed block
  if (!bearer_.empty()) request.set_header("Authorization", bearer_);

  int status = 0;
  std::string error_body;       // a refusal's body (status != 200)
  std::string stream_error;     // what went wrong inside a 200 stream
  bool done = false;            // data: [DONE] arrived
  std::optional<int> reported;  // usage.completion_tokens
  SseParser events;
  StreamTimer timer;
  const auto on_event = [&](std::string_view data) {
    if (data == "[DONE]") {
      done = true;
      return false;
    }
    auto chunk = ParseOpenAiChunk(data);
    if (!chunk.ok()) {
      stream_error = chunk.status().message();
      return false;
    }
    if (!chunk->error.empty()) {
      stream_error = chunk->error;
      return false;
    }
    if (chunk->content) timer.Arrived();
    if (chunk->completion_tokens) reported = chunk->completion_tokens;
    return true;
  };
  request.response_handler = [&](const httplib::Response& response) {
    status = response.status;
    return true;
  };
  request.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    if (status != 200) {
      error_body.append(data, std::min(size, kMaxErrorBodyBytes - std::min(kMaxErrorBodyBytes, error_body.size())));
      return true;
    }
    if (done) return true;  // what follows [DONE] (nothing, from a well-behaved server) is read and dropped
    const Status fed = events.Feed({data, size}, on_event);
    if (!fed.ok()) stream_error = fed.message();
    return stream_error.empty();
  };
  httplib::Response response;
  httplib::Error error = httplib::Error::Success;
  const bool sent = client.send(request, response, error);
  if (!sent && status == 0 && retry_if_stale && error == httplib::Error::Read) return std::nullopt;

  std::string failure;
  if (!stream_error.empty()) {
    failure = "stream: " + stream_error;
  } else if (!sent && status == 0) {
    failure = "connection: " + httplib::to_string(error);
  } else if (status != 200) {
    failure = HttpFailure(status, error_body);
  } else if (!sent) {
    failure = "stream: cut off (" + httplib::to_string(error) + ")";
  } else if (!done) {
    failure = "stream: ended before data: [DONE]";
  }
  return timer.Finish(std::move(failure), reported);
}

}  // namespace tpserve
