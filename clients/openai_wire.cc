#include "clients/openai_wire.h"

#include "common/bounded_json.h"

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>

namespace tpserve {
namespace {

using nlohmann::json;

constexpr size_t kMaxMessageBytes = 300;

std::string Shorten(std::string text) {
  if (text.size() > kMaxMessageBytes) text = text.substr(0, kMaxMessageBytes) + "...";
  return text;
}

bool NonEmptyString(const json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_string() && !it->get_ref<const std::string&>().empty();
}

// The message of an error value: an object with a string "message", or a string.
std::optional<std::string> MessageOf(const json& error) {
  if (error.is_string()) return error.get<std::string>();
  if (error.is_object() && error.contains("message") && error["message"].is_string()) {
    return error["message"].get<std::string>();
  }
  if (!error.is_null()) return error.dump(-1, ' ', false, json::error_handler_t::replace);
  return std::nullopt;
}

}  // namespace

std::string PromptWords(const std::vector<int32_t>& ids) {
  static constexpr std::array<std::string_view, 48> kWords = {
      "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with",
      "be", "by", "on", "not", "he", "this", "are", "or", "his", "from", "at", "which",
      "but", "have", "an", "had", "they", "you", "were", "their", "one", "all", "we", "can",
      "her", "has", "there", "been", "if", "more", "when", "will", "would", "who", "so", "no"};
  std::string text;
  for (int32_t id : ids) {
    if (!text.empty()) text.push_back(' ');
    text.append(kWords[static_cast<uint32_t>(id) % kWords.size()]);
  }
  return text;
}

std::string OpenAiRequestBody(OpenAiRoute route, const std::string& model, const LoadRequest& request) {
  json body = {{"model", model},
               {"max_tokens", request.output_tokens},
               {"min_tokens", request.output_tokens},
               {"ignore_eos", true},
               {"temperature", request.sampling.temperature},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  if (request.sampling.temperature > 0) {
    body["top_p"] = request.sampling.top_p;
    if (request.sampling.top_k > 0) body["top_k"] = request.sampling.top_k;
    body["seed"] = static_cast<int64_t>(request.seed);  // OpenAI's seed is signed: the same 64 bits
  }
  if (route == OpenAiRoute::kCompletions) {
    body["prompt"] = request.prompt_ids.empty() ? json(request.prompt_text) : json(request.prompt_ids);
  } else {
    const std::string text = request.prompt_ids.empty() ? request.prompt_text : PromptWords(request.prompt_ids);
    body["messages"] = json::array({{{"role", "user"}, {"content", text}}});
  }
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<OpenAiChunk> ParseOpenAiChunk(std::string_view data) {
  const json chunk = ParseBoundedJson(data);
  if (!chunk.is_object()) return DataLoss("a streamed chunk that is not a JSON object: " + Shorten(std::string(data)));
  OpenAiChunk out;
  if (const auto error = chunk.find("error"); error != chunk.end()) {
    out.error = Shorten(MessageOf(*error).value_or("an error without a message"));
    return out;
  }
  if (const auto choices = chunk.find("choices"); choices != chunk.end() && choices->is_array()) {
    for (const json& choice : *choices) {
      if (!choice.is_object()) continue;
      const auto delta = choice.find("delta");
      const bool chat_content = delta != choice.end() && delta->is_object() &&
                                (NonEmptyString(*delta, "content") || NonEmptyString(*delta, "reasoning_content"));
      out.content = out.content || NonEmptyString(choice, "text") || chat_content;
    }
  }
  if (const auto usage = chunk.find("usage"); usage != chunk.end() && usage->is_object()) {
    const auto tokens = usage->find("completion_tokens");
    if (tokens != usage->end() && tokens->is_number_unsigned() && tokens->get<uint64_t>() <= INT32_MAX) {
      out.completion_tokens = static_cast<int>(tokens->get<uint64_t>());
    }
  }
  return out;
}

std::string OpenAiErrorMessage(std::string_view body) {
  const json parsed = ParseBoundedJson(body);
  if (parsed.is_object()) {
    for (const char* key : {"error", "detail", "message"}) {
      if (const auto it = parsed.find(key); it != parsed.end()) {
        if (auto message = MessageOf(*it)) return Shorten(*message);
      }
    }
  }
  return Shorten(std::string(body.substr(0, body.find('\n'))));
}

Result<OpenAiServerUrl> ParseOpenAiServerUrl(std::string_view url) {
  OpenAiServerUrl out;
  const size_t scheme_end = url.find("://");
  const std::string_view scheme = scheme_end == std::string_view::npos ? "" : url.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https") {
    return InvalidArgument("--server '" + std::string(url) +
                           "': --api openai takes a URL, http://HOST:PORT or https://HOST:PORT");
  }
  out.tls = scheme == "https";
  const std::string_view rest = url.substr(scheme_end + 3);
  const size_t slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  if (authority.empty() || authority.find_first_of("?#@ ") != std::string_view::npos) {
    return InvalidArgument("--server '" + std::string(url) + "': no HOST:PORT after " + std::string(scheme) + "://");
  }
  out.origin = std::string(scheme) + "://" + std::string(authority);
  std::string prefix(slash == std::string_view::npos ? "" : rest.substr(slash));
  if (prefix.find_first_of("?#") != std::string::npos) {
    return InvalidArgument("--server '" + std::string(url) + "': a query or fragment has no place in a server URL");
  }
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  if (prefix.size() >= 3 && prefix.compare(prefix.size() - 3, 3, "/v1") == 0) prefix.resize(prefix.size() - 3);
  out.prefix = prefix;
  return out;
}

Result<std::string> FirstModelId(std::string_view body) {
  const json parsed = ParseBoundedJson(body);
  if (parsed.is_object() && parsed.contains("data") && parsed["data"].is_array() && !parsed["data"].empty()) {
    const json& first = parsed["data"][0];
    if (first.is_object() && first.contains("id") && first["id"].is_string()) return first["id"].get<std::string>();
  }
  return DataLoss("GET /v1/models: no model in the answer (" + Shorten(std::string(body)) + "); name one with --model");
}

}  // namespace tpserve
