#include "server/http/http_api.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "common/splitmix64.h"
#include "server/http/http_generation.h"
#include "server/http/openai_response.h"

namespace tpserve {
namespace {

using nlohmann::json;

constexpr char kJson[] = "application/json";

HttpResponse JsonResponse(int status, std::string body) {
  HttpResponse response;
  response.status = status;
  response.content_type = kJson;
  response.body = std::move(body);
  return response;
}

HttpResponse ErrorResponse(const Status& status) {
  return JsonResponse(HttpStatusOf(status.code()), OpenAiErrorBody(status));
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

constexpr std::string_view kModelsPrefix = "/v1/models/";

std::optional<OpenAiEndpoint> GenerationEndpoint(const HttpRequest& request) {
  if (request.method != "POST") return std::nullopt;
  if (request.path == "/v1/completions") return OpenAiEndpoint::kCompletions;
  if (request.path == "/v1/chat/completions") return OpenAiEndpoint::kChatCompletions;
  return std::nullopt;
}

bool IsModels(const HttpRequest& request) {
  return request.method == "GET" && (request.path == "/v1/models" ||
                                     (request.path.size() > kModelsPrefix.size() &&
                                      request.path.compare(0, kModelsPrefix.size(), kModelsPrefix) == 0));
}

bool IsHealth(const HttpRequest& request) { return request.method == "GET" && request.path == "/health"; }

}  // namespace

// One response being written: the event loop asks for what arrived whenever the engine says there
// is more, until the generation ends or the client goes away (then the request is cancelled).
struct HttpApi::Stream final : HttpBodyStream {
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

  Stream(EngineLoop* engine_loop, OpenAiResponseBuilder response_builder, const OpenAiRequest& r, bool is_chat)
      : loop(engine_loop), generation(std::make_shared<HttpGeneration>()), builder(std::move(response_builder)),
        stream(r.stream), include_usage(r.include_usage), chat(is_chat), logprobs(r.logprobs) {}

  Piece Next() override {
    std::string bytes;
    if (stream && chat && !started) {
      started = true;  // OpenAI's first chat chunk: the role, empty content
      bytes += SseEvent(builder.Chunk("", {}));
    }
    HttpGeneration::Output out = generation->Take();
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
    return Piece{std::move(bytes), finished};
  }

  void Abandoned() override {
    if (!finished) loop->Cancel(engine_id);  // client gone: free its KV blocks
  }
};

HttpApi::HttpApi(const ModelDirectory* model, const ChatTemplate* chat, EngineLoop* loop,
                 const TpServeService* service, const AccessControl* access, ServerMetrics* metrics,
                 HttpApiOptions options)
    : model_(model), chat_(chat), loop_(loop), service_(service), access_(access), metrics_(metrics),
      options_(std::move(options)), started_at_(UnixSeconds()) {}

HttpResponse HttpApi::Refuse(const Status& status) const {
  if (metrics_ != nullptr) metrics_->CountError(std::string(StatusCodeName(status.code())));
  return ErrorResponse(status);
}

HttpApi::~HttpApi() { Stop(); }

Result<int> HttpApi::Start() {
  HttpServerOptions server_options{.name = "--http-port",
                                   .host = options_.host,
                                   .port = options_.port,
                                   .threads = options_.threads,
                                   .max_connections = options_.max_connections,
                                   .read_timeout_s = options_.read_timeout_s,
                                   .write_timeout_s = options_.read_timeout_s,
                                   .keepalive_timeout_s = options_.keepalive_timeout_s,
                                   .max_body_bytes = options_.max_request_bytes};
  if (access_->tls()) {
    server_options.tls_cert = options_.tls.tls_cert;
    server_options.tls_key = options_.tls.tls_key;
    server_options.tls_client_ca = options_.tls.tls_client_ca;
  }
  HttpHandlers handlers{
      .admit = [this](const HttpRequest& head) { return AdmitHead(head); },
      .handle = [this](HttpRequest& request) { return Handle(request); },
      // The server's own refusals (framing, sizes) get OpenAI's error object too.
      .error = [](int status, const std::string& what) {
        const StatusCode code = status == 500 ? StatusCode::kInternal : StatusCode::kInvalidArgument;
        HttpResponse response = ErrorResponse(Status(code, status == 413 ? what + " (--max-request-bytes)" : what));
        response.status = status;
        return response;
      }};
  server_ = std::make_unique<HttpServer>(std::move(server_options), std::move(handlers));
  return server_->Start();
}

void HttpApi::Stop() {
  if (server_) server_->Stop();
}

std::optional<HttpResponse> HttpApi::AdmitHead(const HttpRequest& head) const {
  if (GenerationEndpoint(head)) {
    if (Status admitted = Admit(head); !admitted.ok()) return Refuse(admitted);
    return std::nullopt;
  }
  if (IsModels(head)) {
    if (Status admitted = Admit(head); !admitted.ok() && admitted.code() == StatusCode::kUnauthenticated) {
      return ErrorResponse(admitted);
    }
    return std::nullopt;
  }
  if (IsHealth(head)) return std::nullopt;
  return ErrorResponse(NotFound("no such endpoint: " + head.method + " " + head.path));
}

HttpResponse HttpApi::Handle(const HttpRequest& request) {
  if (auto endpoint = GenerationEndpoint(request)) return HandleGeneration(*endpoint, request);
  if (IsModels(request)) return Models(request);
  return Health();
}

Status HttpApi::Admit(const HttpRequest& head) const {
  if (access_->requires_key()) RETURN_IF_ERROR(access_->CheckAuthorization(head.Header("Authorization")));
  if (draining_) return Status(StatusCode::kUnavailable, "the server is shutting down");
  if (!loop_->healthy()) return Status(StatusCode::kUnavailable, "the engine has failed; retry on another server");
  return Status::Ok();
}

HttpResponse HttpApi::Health() const {
  const bool serving = !draining_ && loop_->healthy();
  return JsonResponse(serving ? 200 : 503,
                      DumpJson(json{{"status", serving ? "serving" : draining_ ? "draining" : "engine failed"}}));
}

HttpResponse HttpApi::Models(const HttpRequest& request) const {
  const json card{{"id", options_.served_model_name},
                  {"object", "model"},
                  {"created", started_at_},
                  {"owned_by", "tpserve"},
                  {"max_model_len", service_->limits().max_model_len}};
  if (request.path.size() > kModelsPrefix.size()) {
    const std::string name = request.path.substr(kModelsPrefix.size());
    if (name != options_.served_model_name) {
      return ErrorResponse(NotFound("model: '" + name + "' is not served here (" + options_.served_model_name + " is)"));
    }
    return JsonResponse(200, DumpJson(card));
  }
  return JsonResponse(200, DumpJson(json{{"object", "list"}, {"data", json::array({card})}}));
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

HttpResponse HttpApi::HandleGeneration(OpenAiEndpoint endpoint, const HttpRequest& request) {
  auto parsed = ParseOpenAiRequest(endpoint, request.body);
  if (!parsed.ok()) return Refuse(parsed.status());
  OpenAiRequest& r = *parsed;
  if (!r.model.empty() && r.model != options_.served_model_name) {
    return Refuse(NotFound("model: '" + r.model + "' is not served here (" + options_.served_model_name + " is)"));
  }
  if (endpoint == OpenAiEndpoint::kChatCompletions) {
    if (Status rendered = RenderChat(&r); !rendered.ok()) return Refuse(rendered);
  }
  auto serve_request = service_->Validate(r.generate);
  if (!serve_request.ok()) return Refuse(serve_request.status());

  const bool chat = endpoint == OpenAiEndpoint::kChatCompletions;
  const uint64_t n = next_id_.fetch_add(1) + 1;
  OpenAiResponseHeader header{.endpoint = endpoint,
                              .id = fmt::format("{}{:016x}", chat ? "chatcmpl-" : "cmpl-",
                                                SplitMix64At(static_cast<uint64_t>(started_at_), n)),
                              .created = UnixSeconds(),
                              .model = options_.served_model_name};
  auto stream = std::make_shared<Stream>(
      loop_, OpenAiResponseBuilder(std::move(header), &model_->tokenizer, r.logprobs, r.top_logprobs), r, chat);
  stream->generation->SetOnOutput([weak = std::weak_ptr<Stream>(stream)] {
    if (auto s = weak.lock()) s->Wake();
  });
  serve_request->sink = stream->generation;
  auto id = loop_->Submit(std::move(serve_request).value());
  if (!id.ok()) return Refuse(id.status());
  stream->engine_id = *id;
  HttpResponse response;
  // Exactly "text/event-stream", without a charset: what SSE clients and proxies expect.
  response.content_type = r.stream ? "text/event-stream" : kJson;
  if (r.stream) {
    response.headers = {{"Cache-Control", "no-cache"},
                        {"X-Accel-Buffering", "no"}};  // proxies: pass each event on at once
  }
  response.stream = std::move(stream);
  return response;
}

}  // namespace tpserve
