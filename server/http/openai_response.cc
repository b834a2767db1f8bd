#include "server/http/openai_response.h"

namespace tpserve {
namespace {

using json = nlohmann::ordered_json;  // OpenAI's field order: id, object, created, model, ...

bool IsChat(const OpenAiResponseHeader& h) { return h.endpoint == OpenAiEndpoint::kChatCompletions; }

// The bytes a token stands for (a byte-level token may hold part of a UTF-8 character).
std::string TokenBytes(const Tokenizer& tokenizer, int32_t id) {
  const int32_t ids[] = {id};
  auto bytes = tokenizer.DecodeBytes(ids);
  return bytes.ok() ? std::move(bytes).value() : std::string();
}

}  // namespace

std::string DumpJson(const nlohmann::json& value) {
  return value.dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
}

std::string DumpJson(const json& value) {
  return value.dump(-1, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace);
}

std::string SseEvent(std::string_view payload) {
  std::string event;
  event.reserve(payload.size() + 8);
  event.append("data: ").append(payload).append("\n\n");
  return event;
}

OpenAiResponseBuilder::OpenAiResponseBuilder(OpenAiResponseHeader header, const Tokenizer* tokenizer, bool logprobs,
                                             int top_logprobs, int choice_index)
    : header_(std::move(header)), tokenizer_(tokenizer), logprobs_(logprobs), top_logprobs_(top_logprobs),
      choice_index_(choice_index) {}

json OpenAiResponseBuilder::Object(std::string_view object) const {
  return json{{"id", header_.id}, {"object", object}, {"created", header_.created}, {"model", header_.model}};
}

json OpenAiResponseBuilder::TokenEntry(int32_t id, float logprob) const {
  const std::string bytes = TokenBytes(*tokenizer_, id);
  json entry{{"token", bytes}, {"logprob", logprob}, {"bytes", json::array()}};
  for (unsigned char b : bytes) entry["bytes"].push_back(static_cast<int>(b));
  return entry;
}

json OpenAiResponseBuilder::Logprobs(const std::vector<SampledToken>& tokens) {
  if (IsChat(header_)) {
    json content = json::array();
    for (const SampledToken& t : tokens) {
      json entry = TokenEntry(t.id, t.logprob);
      entry["top_logprobs"] = json::array();
      for (size_t k = 0; k < t.top.size() && static_cast<int>(k) < top_logprobs_; ++k) {
        entry["top_logprobs"].push_back(TokenEntry(t.top[k].id, t.top[k].logprob));
      }
      content.push_back(std::move(entry));
    }
    return json{{"content", std::move(content)}};
  }
  json out{{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
           {"text_offset", json::array()}};
  for (const SampledToken& t : tokens) {
    const std::string text = TokenBytes(*tokenizer_, t.id);
    out["tokens"].push_back(text);
    out["token_logprobs"].push_back(t.logprob);
    json top = json::object();
    for (size_t k = 0; k < t.top.size() && static_cast<int>(k) < top_logprobs_; ++k) {
      top[TokenBytes(*tokenizer_, t.top[k].id)] = t.top[k].logprob;  // raw bytes: DumpJson mends UTF-8
    }
    out["top_logprobs"].push_back(std::move(top));
    out["text_offset"].push_back(text_offset_);
    text_offset_ += text.size();
  }
  return out;
}

json OpenAiResponseBuilder::Choice(std::string_view text, const std::vector<SampledToken>& tokens, bool delta) {
  json choice{{"index", choice_index_}};
  if (IsChat(header_)) {
    if (delta) {
      json d = json::object();
      if (!role_sent_) d["role"] = "assistant";
      role_sent_ = true;
      if (!text.empty() || d.contains("role")) d["content"] = text;
      choice["delta"] = std::move(d);
    } else {
      choice["message"] = json{{"role", "assistant"}, {"content", text}};
    }
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = logprobs_ && !tokens.empty() ? Logprobs(tokens) : json(nullptr);
  choice["finish_reason"] = nullptr;
  return choice;
}

std::string OpenAiResponseBuilder::Chunk(std::string_view text, const std::vector<SampledToken>& tokens) {
  json chunk = Object(IsChat(header_) ? "chat.completion.chunk" : "text_completion");
  chunk["choices"] = json::array({Choice(text, tokens, /*delta=*/true)});
  return DumpJson(chunk);
}

std::string OpenAiResponseBuilder::FinishChunk(std::string_view finish_reason) {
  json chunk = Object(IsChat(header_) ? "chat.completion.chunk" : "text_completion");
  json choice = Choice("", {}, /*delta=*/true);
  if (IsChat(header_)) choice["delta"].erase("content");
  choice["finish_reason"] = finish_reason;
  chunk["choices"] = json::array({std::move(choice)});
  return DumpJson(chunk);
}

std::string OpenAiResponseBuilder::UsageChunk(const OpenAiUsage& usage) const {
  json chunk = Object(IsChat(header_) ? "chat.completion.chunk" : "text_completion");
  chunk["choices"] = json::array();
  chunk["usage"] = json{{"prompt_tokens", usage.prompt_tokens},
                        {"completion_tokens", usage.completion_tokens},
                        {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
  return DumpJson(chunk);
}

json OpenAiResponseBuilder::FinishedChoice(std::string_view text, const std::vector<SampledToken>& tokens,
                                           std::string_view finish_reason) {
  json choice = Choice(text, tokens, /*delta=*/false);
  choice["finish_reason"] = finish_reason;
  return choice;
}

std::string OpenAiResponseBuilder::Whole(std::vector<json> choices, const OpenAiUsage& usage) const {
  json response = Object(IsChat(header_) ? "chat.completion" : "text_completion");
  response["choices"] = json::array();
  for (json& choice : choices) response["choices"].push_back(std::move(choice));
  response["usage"] = json{{"prompt_tokens", usage.prompt_tokens},
                           {"completion_tokens", usage.completion_tokens},
                           {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
  return DumpJson(response);
}

int HttpStatusOf(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return 200;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kFailedPrecondition: return 400;
    case StatusCode::kUnauthenticated: return 401;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kResourceExhausted: return 429;
    case StatusCode::kUnavailable: return 503;
    case StatusCode::kDeadlineExceeded: return 504;
    default: return 500;
  }
}

std::string OpenAiErrorBody(const Status& status) {
  const int http = HttpStatusOf(status.code());
  const char* type = http == 400 || http == 404 ? "invalid_request_error"
                     : http == 401          ? "authentication_error"
                     : http == 429          ? "rate_limit_error"
                                            : "server_error";
  const std::string param = OpenAiParamOf(status);
  json error{{"message", status.message()},
             {"type", type},
             {"param", param.empty() || http != 400 ? json(nullptr) : json(param)},
             {"code", http == 404 && param == "model" ? json("model_not_found") : json(nullptr)}};
  return DumpJson(json{{"error", std::move(error)}});
}

}  // namespace tpserve
