#include "server/http/http_api.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "common/bounded_json.h"
#include "common/splitmix64.h"
#include "server/http/http_generation.h"
#include "server/http/openai_response.h"
#include "server/http/openai_responses.h"

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
  if (request.path == "/v1/responses") return OpenAiEndpoint::kResponses;
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
// is more, until every choice's generation ends or the client goes away (then the requests are
// cancelled). A completions request with a list of prompts has one choice, and one engine request,
// per prompt; chat has one.
struct HttpApi::Stream final : HttpBodyStream {
  struct Choice {
    std::shared_ptr<HttpGeneration> generation = std::make_shared<HttpGeneration>();
    OpenAiResponseBuilder builder;
    uint64_t engine_id = 0;
    std::string text;                  // non-streamed: everything so far
    std::vector<SampledToken> tokens;  // ... and its tokens
    std::optional<HttpGeneration::End> end;
  };

  EngineLoop* loop = nullptr;
  std::vector<Choice> choices;
  std::optional<ResponsesApiBuilder> responses;  // POST /v1/responses: its objects instead
  bool stream = false;
  bool include_usage = false;
  bool chat = false;
  bool logprobs = false;
  bool started = false;
  bool finished = false;

  Stream(EngineLoop* engine_loop, const OpenAiRequest& r, bool is_chat)
      : loop(engine_loop), stream(r.stream), include_usage(r.include_usage), chat(is_chat), logprobs(r.logprobs) {}

  Piece Next() override {
    if (responses) return NextOfResponses();
    std::string bytes;
    if (stream && chat && !started) {
      started = true;  // OpenAI's first chat chunk: the role, empty content
      bytes += SseEvent(choices.front().builder.Chunk("", {}));
    }
    OpenAiUsage usage;
    bool all_ended = true;
    for (Choice& choice : choices) {
      if (choice.end) {
        usage.prompt_tokens += choice.end->prompt_tokens;
        usage.completion_tokens += choice.end->completion_tokens;
        continue;
      }
      HttpGeneration::Output out = choice.generation->Take();
      if (stream) {
        if (!out.text.empty() || (!out.tokens.empty() && logprobs)) {
          bytes += SseEvent(choice.builder.Chunk(out.text, out.tokens));
        }
      } else {
        choice.text += out.text;
        for (SampledToken& t : out.tokens) choice.tokens.push_back(std::move(t));
      }
      if (out.error) {  // one choice failed: the response fails, and the other choices stop
        finished = true;
        CancelUnfinished();
        const std::string error = OpenAiErrorBody(*out.error);
        return Piece{stream ? bytes + SseEvent(error) + std::string(kSseDone) : error, true};
      }
      if (out.end) {
        choice.end = out.end;
        usage.prompt_tokens += out.end->prompt_tokens;
        usage.completion_tokens += out.end->completion_tokens;
        if (stream) bytes += SseEvent(choice.builder.FinishChunk(FinishReasonText(out.end->reason)));
      } else {
        all_ended = false;
      }
    }
    if (all_ended) {
      finished = true;
      if (stream) {
        if (include_usage) bytes += SseEvent(choices.front().builder.UsageChunk(usage));
        bytes += kSseDone;
      } else {
        std::vector<nlohmann::ordered_json> whole;
        for (Choice& choice : choices) {
          whole.push_back(choice.builder.FinishedChoice(choice.text, choice.tokens, FinishReasonText(choice.end->reason)));
        }
        bytes = choices.front().builder.Whole(std::move(whole), usage);
      }
    }
    return Piece{std::move(bytes), finished};
  }

  // The Responses API: one choice, its own events and object.
  Piece NextOfResponses() {
    Choice& choice = choices.front();
    std::string bytes;
    if (stream && !started) {
      started = true;
      bytes += responses->StartEvents();
    }
    HttpGeneration::Output out = choice.generation->Take();
    choice.text += out.text;
    if (stream && !out.text.empty()) bytes += responses->DeltaEvent(out.text);
    if (out.error) {
      finished = true;
      return Piece{stream ? bytes + responses->ErrorEvent(*out.error) : OpenAiErrorBody(*out.error), true};
    }
    if (out.end) {
      finished = true;
      choice.end = out.end;
      const OpenAiUsage usage{out.end->prompt_tokens, out.end->completion_tokens};
      const std::string reason = FinishReasonText(out.end->reason);
      if (stream) {
        bytes += responses->FinishEvents(choice.text, reason, usage);
      } else {
        bytes = responses->Whole(choice.text, reason, usage);
      }
    }
    return Piece{std::move(bytes), finished};
  }

  void Abandoned() override {
    if (!finished) CancelUnfinished();  // client gone: free the KV blocks
  }

  void CancelUnfinished() {
    for (Choice& choice : choices) {
      if (!choice.end && choice.engine_id != 0) loop->Cancel(choice.engine_id);
    }
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

Status HttpApi::ModelNotServed(const std::string& name) const {
  // The name as sent, cut to 64 bytes: an error message never holds an unbounded copy.
  return NotFound("model: " + DescribeJsonForError(json(name)) + " is not served here (" + options_.served_model_name +
                  " is)");
}

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
      .admit =
          [this](const HttpRequest& head) {
            std::optional<HttpResponse> refused = AdmitHead(head);
            if (refused) AddCorsHeaders(head, &*refused);
            return refused;
          },
      .handle =
          [this](HttpRequest& request) {
            HttpResponse response = Handle(request);
            AddCorsHeaders(request, &response);
            return response;
          },
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
  // A browser's preflight carries no key: it is answered from the head, before any check.
  if (head.method == "OPTIONS" && !options_.allowed_origins.empty()) return Preflight(head);
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

bool HttpApi::OriginAllowed(const std::string& origin) const {
  if (origin.empty()) return false;
  return std::any_of(options_.allowed_origins.begin(), options_.allowed_origins.end(),
                     [&](const std::string& allowed) { return allowed == "*" || allowed == origin; });
}

HttpResponse HttpApi::Preflight(const HttpRequest& head) const {
  HttpResponse response;
  const std::string origin = head.Header("Origin");
  if (!OriginAllowed(origin)) {
    response = ErrorResponse(
        InvalidArgument("Origin: " + DescribeJsonForError(json(origin)) + " is not in the server's --allowed-origins"));
    response.status = 403;
    return response;
  }
  response.status = 204;
  response.headers = {{"Access-Control-Allow-Methods", "GET, POST, OPTIONS"},
                      {"Access-Control-Allow-Headers", "Authorization, Content-Type"},
                      {"Access-Control-Max-Age", "600"}};
  return response;  // Allow-Origin and Vary: AddCorsHeaders
}

void HttpApi::AddCorsHeaders(const HttpRequest& request, HttpResponse* response) const {
  if (options_.allowed_origins.empty()) return;
  response->headers.emplace_back("Vary", "Origin");  // a cache must not serve one origin's answer to another
  const std::string origin = request.Header("Origin");
  if (OriginAllowed(origin)) response->headers.emplace_back("Access-Control-Allow-Origin", origin);
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
    if (name != options_.served_model_name) return ErrorResponse(ModelNotServed(name));
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
  request->prompts = {request->generate};  // the conversation is the one request to run
  return Status::Ok();
}

HttpResponse HttpApi::HandleGeneration(OpenAiEndpoint endpoint, const HttpRequest& request) {
  auto parsed = ParseOpenAiRequest(endpoint, request.body);
  if (!parsed.ok()) return Refuse(parsed.status());
  OpenAiRequest& r = *parsed;
  const bool chat = endpoint == OpenAiEndpoint::kChatCompletions;
  const bool from_messages = endpoint != OpenAiEndpoint::kCompletions;  // chat and responses
  if (!r.model.empty() && r.model != options_.served_model_name) return Refuse(ModelNotServed(r.model));
  if (from_messages) {
    if (Status rendered = RenderChat(&r); !rendered.ok()) return Refuse(rendered);
  }
  std::vector<ServeRequest> serve_requests;
  for (const v1::GenerateRequest& one : r.prompts) {
    auto serve_request = service_->Validate(one);
    if (!serve_request.ok()) {
      Status refused = serve_request.status();
      // Chat asks for alternatives with top_logprobs; the shared check names the gRPC field.
      if (chat && OpenAiParamOf(refused) == "logprobs") {
        refused = InvalidArgument("top_logprobs: must be in [0, " + std::to_string(service_->limits().max_logprobs) +
                                  "], got " + std::to_string(r.top_logprobs));
      } else if (r.prompts.size() > 1) {  // which prompt of the list
        refused = Status(refused.code(),
                         refused.message() + " (prompt[" + std::to_string(serve_requests.size()) + "] of the list)");
      }
      return Refuse(refused);
    }
    serve_requests.push_back(std::move(serve_request).value());
  }

  const uint64_t n = next_id_.fetch_add(1) + 1;
  const OpenAiResponseHeader header{.endpoint = endpoint,
                                    .id = fmt::format("{}{:016x}", chat ? "chatcmpl-" : from_messages ? "resp_" : "cmpl-",
                                                      SplitMix64At(static_cast<uint64_t>(started_at_), n)),
                                    .created = UnixSeconds(),
                                    .model = options_.served_model_name};
  auto stream = std::make_shared<Stream>(loop_, r, chat);
  if (endpoint == OpenAiEndpoint::kResponses) {
    const v1::SamplingParams& sampling = r.generate.sampling();
    stream->responses.emplace(ResponsesApiSettings{
        .id = header.id,
        .message_id = fmt::format("msg_{:016x}", SplitMix64At(static_cast<uint64_t>(started_at_) + 1, n)),
        .created_at = header.created,
        .model = header.model,
        .instructions = r.instructions,
        .max_output_tokens = r.max_output_tokens,
        .temperature = sampling.temperature(),
        .top_p = sampling.top_p()});
  }
  stream->choices.reserve(serve_requests.size());
  for (size_t i = 0; i < serve_requests.size(); ++i) {
    Stream::Choice& choice = stream->choices.emplace_back(Stream::Choice{
        .builder = OpenAiResponseBuilder(header, &model_->tokenizer, r.logprobs, r.top_logprobs, static_cast<int>(i))});
    choice.generation->SetOnOutput([weak = std::weak_ptr<Stream>(stream)] {
      if (auto s = weak.lock()) s->Wake();
    });
    serve_requests[i].sink = choice.generation;
    auto id = loop_->Submit(std::move(serve_requests[i]));
    if (!id.ok()) {  // the queue filled up part-way: the prompts already queued are cancelled
      stream->CancelUnfinished();
      return Refuse(id.status());
    }
    choice.engine_id = *id;
  }
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
