#include "server/http/http_api.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <chrono>

#include "common/splitmix64.h"
#include "server/http/http_generation.h"
#include "server/http/openai_response.h"

namespace tpserve {
namespace {

using nlohmann::json;

constexpr auto kPollInterval = std::chrono::milliseconds(100);  // how soon a closed connection is noticed

void SendError(httplib::Response& response, const Status& status) {
  response.status = HttpStatusOf(status.code());
  response.set_content(OpenAiErrorBody(status), "application/json");
}

std::string FinishReasonText(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength: return "length";
    case FinishReason::kStop: return "stop";
    case FinishReason::kCancelled: return "abort";
  }
  return "stop";
}

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

// One response being written: pumped by httplib's chunked content provider on the connection's
// thread until the generation ends or the client goes away (then the request is cancelled).
struct HttpApi::Stream {
  EngineLoop* loop = nullptr;
  uint64_t engine_id = 0;
  std::shared_ptr<HttpGeneration> generation;
  OpenAiResponseBuilder builder;
  bool stream = false;
  bool include_usage = false;
  bool chat = false;
  bool logprobs = false;
  bool started = false;
  bool finished = false;
  std::string text;                  // non-streamed: everything so far
  std::vector<SampledToken> tokens;  // ... and its tokens

  // Writes what arrived; false ends the response (client gone or an error writing).
  bool Pump(httplib::DataSink& sink) {
    if (stream && chat && !started) {
      started = true;  // OpenAI's first chat chunk: the role, empty content
      const std::string first = SseEvent(builder.Chunk("", {}));
      if (!sink.write(first.data(), first.size())) return false;
    }
    HttpGeneration::Output out = generation->Take(kPollInterval);
    if (!sink.is_writable()) return false;
    std::string bytes;
    if (stream) {
      if (!out.text.empty() || (!out.tokens.empty() && logprobs)) {
        bytes += SseEvent(builder.Chunk(out.text, out.tokens));
      }
    } else {
      text += out.text;
      for (SampledToken& t : out.tokens) tokens.push_back(std::move(t));
    }
    if (out.error) {
      finished = true;
      bytes += stream ? SseEvent(OpenAiErrorBody(*out.error)) + std::string(kSseDone) : OpenAiErrorBody(*out.error);
    } else if (out.end) {
      finished = true;
      const OpenAiUsage usage{out.end->prompt_tokens, out.end->completion_tokens};
      const std::string reason = FinishReasonText(out.end->reason);
      if (stream) {
        bytes += SseEvent(builder.FinishChunk(reason));
        if (include_usage) bytes += SseEvent(builder.UsageChunk(usage));
        bytes += kSseDone;
      } else {
        bytes = builder.Whole(text, tokens, reason, usage);
      }
    }
    if (!bytes.empty() && !sink.write(bytes.data(), bytes.size())) return false;
    if (finished) sink.done();
    return true;
  }
};

HttpApi::HttpApi(const ModelDirectory* model, const ChatTemplate* chat, EngineLoop* loop,
                 const TpServeService* service, const AccessControl* access, ServerMetrics* metrics,
                 HttpApiOptions options)
    : model_(model), chat_(chat), loop_(loop), service_(service), access_(access), metrics_(metrics),
      options_(std::move(options)), started_at_(UnixSeconds()) {}

void HttpApi::Refuse(httplib::Response& response, const Status& status) const {
  if (metrics_ != nullptr) metrics_->CountError(std::string(StatusCodeName(status.code())));
  SendError(response, status);
}

HttpApi::~HttpApi() { Stop(); }

Result<int> HttpApi::Start() {
  if (access_->tls()) {
    server_ = std::make_unique<httplib::SSLServer>(
        options_.tls.tls_cert.c_str(), options_.tls.tls_key.c_str(),
        options_.tls.tls_client_ca.empty() ? nullptr : options_.tls.tls_client_ca.c_str());
  } else {
    server_ = std::make_unique<httplib::Server>();
  }
  if (!server_->is_valid()) return InvalidArgument("--http-port: cannot set up TLS with --tls-cert/--tls-key");
  const int threads = options_.threads;
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  server_->set_read_timeout(options_.read_timeout_s, 0);
  server_->set_write_timeout(options_.read_timeout_s, 0);
  server_->set_keep_alive_timeout(options_.keepalive_timeout_s);
  server_->set_keep_alive_max_count(1000);
  server_->set_payload_max_length(options_.max_request_bytes);
  server_->set_tcp_nodelay(true);
  Route();
  const int port = options_.port == 0 ? server_->bind_to_any_port(options_.host)
                                      : (server_->bind_to_port(options_.host, options_.port) ? options_.port : -1);
  if (port <= 0) return Status(StatusCode::kUnavailable, "--http-port: cannot listen on " + options_.host + ":" +
                                                             std::to_string(options_.port));
  thread_ = std::make_unique<std::thread>([this] { server_->listen_after_bind(); });
  return port;
}

void HttpApi::Stop() {
  if (server_) server_->stop();
  if (thread_ && thread_->joinable()) thread_->join();
  thread_.reset();
}

void HttpApi::Route() {
  server_->Get("/health", [this](const httplib::Request&, httplib::Response& response) { Health(response); });
  server_->Get("/v1/models", [this](const httplib::Request& q, httplib::Response& r) { Models(q, r); });
  server_->Get(R"(/v1/models/(.+))", [this](const httplib::Request& q, httplib::Response& r) { Models(q, r); });
  server_->Post("/v1/completions", [this](const httplib::Request& q, httplib::Response& r) {
    HandleGeneration(OpenAiEndpoint::kCompletions, q, r);
  });
  server_->Post("/v1/chat/completions", [this](const httplib::Request& q, httplib::Response& r) {
    HandleGeneration(OpenAiEndpoint::kChatCompletions, q, r);
  });
  // httplib's own refusals (no route, body too large, bad request line) get OpenAI's error object.
  server_->set_error_handler([](const httplib::Request& request, httplib::Response& response) {
    if (!response.body.empty()) return;
    const std::string what = response.status == 404   ? "no such endpoint: " + request.method + " " + request.path
                             : response.status == 413 ? "body: larger than this server accepts (--max-request-bytes)"
                                                      : "the request could not be read";
    response.set_content(OpenAiErrorBody(Status(response.status == 404 ? StatusCode::kNotFound
                                                                          : StatusCode::kInvalidArgument,
                                                   what)),
                         "application/json");
  });
  server_->set_exception_handler([](const httplib::Request&, httplib::Response& response, std::exception_ptr) {
    SendError(response, Status(StatusCode::kInternal, "internal error"));
  });
}

Status HttpApi::Admit(const httplib::Request& request) const {
  if (access_->requires_key()) RETURN_IF_ERROR(access_->CheckAuthorization(request.get_header_value("Authorization")));
  if (draining_) return Status(StatusCode::kUnavailable, "the server is shutting down");
  if (!loop_->healthy()) return Status(StatusCode::kUnavailable, "the engine has failed; retry on another server");
  return Status::Ok();
}

void HttpApi::Health(httplib::Response& response) const {
  const bool serving = !draining_ && loop_->healthy();
  response.status = serving ? 200 : 503;
  response.set_content(DumpJson(json{{"status", serving ? "serving" : draining_ ? "draining" : "engine failed"}}),
                       "application/json");
}

void HttpApi::Models(const httplib::Request& request, httplib::Response& response) const {
  if (Status admitted = Admit(request); !admitted.ok() && admitted.code() == StatusCode::kUnauthenticated) {
    return SendError(response, admitted);
  }
  const json card{{"id", options_.served_model_name},
                  {"object", "model"},
                  {"created", started_at_},
                  {"owned_by", "tpserve"},
                  {"max_model_len", service_->limits().max_model_len}};
  if (request.matches.size() > 1) {
    if (request.matches[1] != options_.served_model_name) {
      return SendError(response, NotFound("model: '" + std::string(request.matches[1]) + "' is not served here (" +
                                          options_.served_model_name + " is)"));
    }
    response.set_content(DumpJson(card), "application/json");
    return;
  }
  response.set_content(DumpJson(json{{"object", "list"}, {"data", json::array({card})}}), "application/json");
}

Status HttpApi::RenderChat(OpenAiRequest* request) const {
  if (chat_ == nullptr) {
    return InvalidArgument("messages: this model has no chat template (tokenizer_config.json has no chat_template); "
                           "use /v1/completions");
  }
  ASSIGN_OR_RETURN(RenderedChat rendered, chat_->Render(request->messages, /*add_generation_prompt=*/true));
  std::vector<std::pair<size_t, size_t>> plain;
  plain.reserve(rendered.from_messages.size());
  for (const TextRange& r : rendered.from_messages) plain.emplace_back(r.begin, r.end);
  auto ids = model_->tokenizer.EncodeWithPlainRanges(rendered.text, plain);
  if (!ids.ok()) return InvalidArgument("messages: " + ids.status().message());
  if (ids->empty()) return InvalidArgument("messages: the rendered conversation is empty");
  request->generate.mutable_token_ids()->mutable_ids()->Assign(ids->begin(), ids->end());
  if (request->generate.max_tokens() == 0) {  // chat's default: what is left of the context, within the cap
    const ServiceLimits& limits = service_->limits();
    int64_t room = int64_t{limits.max_model_len} - static_cast<int64_t>(ids->size());
    if (limits.max_new_tokens > 0) room = std::min<int64_t>(room, limits.max_new_tokens);
    request->generate.set_max_tokens(static_cast<int32_t>(std::max<int64_t>(room, 1)));
  }
  return Status::Ok();
}

void HttpApi::HandleGeneration(OpenAiEndpoint endpoint, const httplib::Request& request, httplib::Response& response) {
  if (Status admitted = Admit(request); !admitted.ok()) return Refuse(response, admitted);
  auto parsed = ParseOpenAiRequest(endpoint, request.body);
  if (!parsed.ok()) return Refuse(response, parsed.status());
  OpenAiRequest& r = *parsed;
  if (!r.model.empty() && r.model != options_.served_model_name) {
    return Refuse(response, NotFound("model: '" + r.model + "' is not served here (" +
                                        options_.served_model_name + " is)"));
  }
  if (endpoint == OpenAiEndpoint::kChatCompletions) {
    if (Status rendered = RenderChat(&r); !rendered.ok()) return Refuse(response, rendered);
  }
  auto serve_request = service_->Validate(r.generate);
  if (!serve_request.ok()) return Refuse(response, serve_request.status());

  const bool chat = endpoint == OpenAiEndpoint::kChatCompletions;
  const uint64_t n = next_id_.fetch_add(1) + 1;
  OpenAiResponseHeader header{.endpoint = endpoint,
                              .id = fmt::format("{}{:016x}", chat ? "chatcmpl-" : "cmpl-",
                                                SplitMix64At(static_cast<uint64_t>(started_at_), n)),
                              .created = UnixSeconds(),
                              .model = options_.served_model_name};
  auto stream = std::make_shared<Stream>(Stream{
      .loop = loop_,
      .generation = std::make_shared<HttpGeneration>(),
      .builder = OpenAiResponseBuilder(std::move(header), &model_->tokenizer, r.logprobs, r.top_logprobs),
      .stream = r.stream,
      .include_usage = r.include_usage,
      .chat = chat,
      .logprobs = r.logprobs});
  serve_request->sink = stream->generation;
  auto id = loop_->Submit(std::move(serve_request).value());
  if (!id.ok()) return Refuse(response, id.status());
  stream->engine_id = *id;
  if (r.stream) {
    response.set_header("Cache-Control", "no-cache");
    response.set_header("X-Accel-Buffering", "no");  // proxies: pass each event on at once
  }
  response.set_chunked_content_provider(
      // Exactly "text/event-stream": cpp-httplib compresses any other type (with a charset too)
      // when the client accepts gzip, which holds every event back until the end.
      r.stream ? "text/event-stream" : "application/json",
      [stream](size_t, httplib::DataSink& sink) { return stream->Pump(sink); },
      [stream](bool) {
        if (!stream->finished) stream->loop->Cancel(stream->engine_id);  // client gone: free its KV blocks
      });
}

}  // namespace tpserve
