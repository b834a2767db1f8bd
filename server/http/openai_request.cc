#include "server/http/openai_request.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <optional>

#include "common/bounded_json.h"

namespace tpserve {
namespace {

using json = nlohmann::ordered_json;  // keeps the keys of messages in the order sent (tojson)

Status Refuse(std::string_view param, std::string what) {
  return InvalidArgument(std::string(param) + ": " + std::move(what));
}

std::string TypeName(const json& value) { return value.type_name(); }

// The value of `param`, or nullptr when absent or null (OpenAI treats null as "not given").
const json* Find(const json& body, std::string_view param) {
  auto it = body.find(param);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

Result<std::optional<bool>> GetBool(const json& body, std::string_view param) {
  const json* v = Find(body, param);
  if (v == nullptr) return std::optional<bool>();
  if (!v->is_boolean()) return Refuse(param, "must be a boolean, got " + TypeName(*v));
  return std::optional<bool>(v->get<bool>());
}

Result<std::optional<double>> GetNumber(const json& body, std::string_view param) {
  const json* v = Find(body, param);
  if (v == nullptr) return std::optional<double>();
  if (!v->is_number()) return Refuse(param, "must be a number, got " + TypeName(*v));
  const double d = v->get<double>();
  if (!std::isfinite(d)) return Refuse(param, "must be finite");
  return std::optional<double>(d);
}

// An integer in [lo, hi]; 2.0 is an integer, 2.5 is not.
Result<std::optional<int64_t>> GetInt(const json& body, std::string_view param, int64_t lo, int64_t hi) {
  const json* v = Find(body, param);
  if (v == nullptr) return std::optional<int64_t>();
  const auto out_of_range = [&] {
    return Refuse(param, "must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                             v->dump());
  };
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();  // JSON's non-negative integers parse as unsigned
    if (u > static_cast<uint64_t>(hi) || (lo > 0 && u < static_cast<uint64_t>(lo))) return out_of_range();
    return std::optional<int64_t>(static_cast<int64_t>(u));
  }
  if (v->is_number_integer()) {
    const int64_t i = v->get<int64_t>();
    if (i < lo || i > hi) return out_of_range();
    return std::optional<int64_t>(i);
  }
  if (!v->is_number_float()) return Refuse(param, "must be an integer, got " + TypeName(*v));
  // 2.0 is an integer, 2.5 is not; the bounds are checked in double before any conversion.
  const double d = v->get<double>();
  if (!(d == std::floor(d) && d >= static_cast<double>(lo) && d <= static_cast<double>(hi))) return out_of_range();
  if (d >= 9.2e18) return out_of_range();  // int64 max is not exactly a double
  return std::optional<int64_t>(static_cast<int64_t>(d));
}

constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();

// `stop`: a string or an array of strings.
Status ReadStop(const json& body, v1::GenerateRequest* out) {
  const json* v = Find(body, "stop");
  if (v == nullptr) return Status::Ok();
  if (v->is_string()) {
    out->add_stop(v->get<std::string>());
    return Status::Ok();
  }
  if (!v->is_array()) return Refuse("stop", "must be a string or an array of strings, got " + TypeName(*v));
  for (const json& s : *v) {
    if (!s.is_string()) return Refuse("stop", "must be a string or an array of strings, got an array holding a " + TypeName(s));
    out->add_stop(s.get<std::string>());
  }
  return Status::Ok();
}

// One prompt: a string, or a non-empty array of token ids (used as is). `where` names it.
Status ReadOnePrompt(const json& value, const std::string& where, v1::GenerateRequest* out) {
  if (value.is_string()) {
    out->set_text(value.get<std::string>());
    return Status::Ok();
  }
  if (!value.is_array()) return Refuse(where, "must be a string or an array of token ids, got " + TypeName(value));
  if (value.empty()) return Refuse(where, "is empty");
  for (const json& id : value) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kIntMax) {
      return Refuse(where, "token ids must be non-negative integers, got " + DescribeJsonForError(id));
    }
    out->mutable_token_ids()->add_ids(static_cast<int32_t>(id.get<int64_t>()));
  }
  return Status::Ok();
}

// Completions' `prompt`: a string, an array of token ids, or a list of either (one choice each, at
// most kMaxPromptsPerRequest). Each element of the result holds only its prompt.
Result<std::vector<v1::GenerateRequest>> ReadPrompts(const json& body) {
  const json* v = Find(body, "prompt");
  if (v == nullptr) return Refuse("prompt", "is required");
  std::vector<v1::GenerateRequest> prompts;
  if (!(v->is_array() && !v->empty() && (v->front().is_string() || v->front().is_array()))) {
    RETURN_IF_ERROR(ReadOnePrompt(*v, "prompt", &prompts.emplace_back()));
    return prompts;
  }
  if (v->size() > static_cast<size_t>(kMaxPromptsPerRequest)) {
    return Refuse("prompt", "a list of " + std::to_string(v->size()) + " prompts, at most " +
                                std::to_string(kMaxPromptsPerRequest) + " per request");
  }
  for (size_t i = 0; i < v->size(); ++i) {
    const json& one = (*v)[i];
    const std::string where = "prompt[" + std::to_string(i) + "]";
    if (one.is_string() != v->front().is_string()) {
      return Refuse(where, "a list of prompts holds strings or arrays of token ids, not both");
    }
    RETURN_IF_ERROR(ReadOnePrompt(one, where, &prompts.emplace_back()));
  }
  return prompts;
}

bool IsChatRole(const std::string& role) {
  return std::find(std::begin(kChatRoles), std::end(kChatRoles), role) != std::end(kChatRoles);
}

// A message's content parts joined into one string: `text_types` are the part types that hold text
// (chat: text; Responses: input_text, output_text); any other type is refused naming the part, with
// `only` saying what is taken.
Result<std::string> JoinTextParts(const json& parts, const std::string& where,
                                  std::initializer_list<std::string_view> text_types, std::string_view only) {
  std::string joined;
  for (size_t p = 0; p < parts.size(); ++p) {
    const json& part = parts[p];
    const std::string part_where = where + ".content[" + std::to_string(p) + "]";
    if (!part.is_object()) return Refuse(part_where, "must be an object, got " + TypeName(part));
    const json* type = Find(part, "type");
    if (type == nullptr || !type->is_string()) return Refuse(part_where + ".type", "must be a string");
    if (std::find(text_types.begin(), text_types.end(), type->get_ref<const std::string&>()) == text_types.end()) {
      return Refuse(part_where + ".type", DescribeJsonForError(*type) + " is not supported (" + std::string(only) + ")");
    }
    const json* text = Find(part, "text");
    if (text == nullptr || !text->is_string()) return Refuse(part_where + ".text", "must be a string");
    joined += text->get<std::string>();
  }
  return joined;
}

// Chat `messages`: each an object with a string `role` and `content` that is a string, null, or
// an array of text parts (joined). Other keys (name, ...) pass through to the template.
Result<json> ReadMessages(const json& body) {
  const json* v = Find(body, "messages");
  if (v == nullptr) return Refuse("messages", "is required");
  if (!v->is_array() || v->empty()) return Refuse("messages", "must be a non-empty array");
  json messages = json::array();
  for (size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return Refuse(where, "must be an object, got " + TypeName(m));
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) return Refuse(where + ".role", "must be a string");
    if (!IsChatRole(role->get<std::string>())) {
      return Refuse(where + ".role", DescribeJsonForError(*role) + " is not one of system, developer, user, assistant, tool");
    }
    json out = m;
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      out["content"] = "";
    } else if (content->is_array()) {
      ASSIGN_OR_RETURN(out["content"], JoinTextParts(*content, where, {"text"}, "text only"));
    } else if (!content->is_string()) {
      return Refuse(where + ".content", "must be a string or an array of text parts, got " + TypeName(*content));
    }
    for (const char* unsupported : {"tool_calls", "function_call"}) {
      if (const json* calls = Find(m, unsupported); calls != nullptr && !(calls->is_array() && calls->empty())) {
        return Refuse(where + "." + unsupported, "tool calls are not supported");
      }
    }
    messages.push_back(std::move(out));
  }
  return messages;
}

// Responses' `instructions` and `input` as chat messages: `input` is a string (one user message) or
// a list of message items ({"role", "content"}, `type` "message" when given) whose content is a
// string or a list of input_text / output_text parts. Other items (function calls, images, files,
// reasoning) are refused naming the item: text in, text out.
Result<json> ReadResponsesInput(const json& body) {
  json messages = json::array();
  if (const json* instructions = Find(body, "instructions"); instructions != nullptr) {
    if (!instructions->is_string()) return Refuse("instructions", "must be a string, got " + TypeName(*instructions));
    messages.push_back(json{{"role", "system"}, {"content", instructions->get<std::string>()}});
  }
  const json* input = Find(body, "input");
  if (input == nullptr) return Refuse("input", "is required");
  if (input->is_string()) {
    messages.push_back(json{{"role", "user"}, {"content", input->get<std::string>()}});
    return messages;
  }
  if (!input->is_array() || input->empty()) return Refuse("input", "must be a string or a non-empty list of messages");
  for (size_t i = 0; i < input->size(); ++i) {
    const json& item = (*input)[i];
    const std::string where = "input[" + std::to_string(i) + "]";
    if (!item.is_object()) return Refuse(where, "must be an object, got " + TypeName(item));
    if (const json* type = Find(item, "type"); type != nullptr && *type != "message") {
      return Refuse(where + ".type", DescribeJsonForError(*type) + " is not supported (text messages only)");
    }
    const json* role = Find(item, "role");
    if (role == nullptr || !role->is_string()) return Refuse(where + ".role", "must be a string");
    if (!IsChatRole(role->get<std::string>()) || *role == "tool") {
      return Refuse(where + ".role", DescribeJsonForError(*role) + " is not one of system, developer, user, assistant");
    }
    const json* content = Find(item, "content");
    std::string text;
    if (content != nullptr && content->is_string()) {
      text = content->get<std::string>();
    } else if (content != nullptr && content->is_array()) {
      ASSIGN_OR_RETURN(text, JoinTextParts(*content, where, {"input_text", "output_text"}, "input_text only"));
    } else {
      return Refuse(where + ".content", "must be a string or a list of input_text parts");
    }
    messages.push_back(json{{"role", role->get<std::string>()}, {"content", std::move(text)}});
  }
  return messages;
}

// What a Responses request may ask for and tpserve does not do: stored state, formats, logprobs (tools:
// RefuseUnsupported, as for the other endpoints).
Status RefuseUnsupportedResponses(const json& body) {
  if (Find(body, "previous_response_id") != nullptr) {
    return Refuse("previous_response_id", "is not supported: the server stores no responses; send the whole "
                                          "conversation in input");
  }
  if (Find(body, "conversation") != nullptr) return Refuse("conversation", "is not supported (no stored state)");
  ASSIGN_OR_RETURN(auto background, GetBool(body, "background"));
  if (background.value_or(false)) return Refuse("background", "is not supported");
  if (const json* text = Find(body, "text"); text != nullptr) {
    const json* format = text->is_object() ? Find(*text, "format") : nullptr;
    if (!text->is_object() || (format != nullptr && !(format->is_object() && format->value("type", "") == "text"))) {
      return Refuse("text", "only {\"format\": {\"type\": \"text\"}} is supported");
    }
  }
  ASSIGN_OR_RETURN(auto top_logprobs, GetInt(body, "top_logprobs", 0, kIntMax));
  if (top_logprobs.value_or(0) > 0) return Refuse("top_logprobs", "is not supported on /v1/responses");
  return Status::Ok();
}

// Fields whose every value but the neutral one asks for what tpserve does not do.
Status RefuseUnsupported(const json& body, OpenAiEndpoint endpoint) {
  ASSIGN_OR_RETURN(auto n, GetInt(body, "n", 1, kIntMax));
  if (n && *n != 1) return Refuse("n", "only n = 1 is supported; send n requests");
  for (const char* list : {"tools", "functions"}) {
    if (const json* v = Find(body, list); v != nullptr && !(v->is_array() && v->empty())) {
      return Refuse(list, "tools and function calling are not supported");
    }
  }
  // "none", and on /v1/responses "auto" too (with no tools, what the SDKs send by default).
  if (const json* v = Find(body, "tool_choice");
      v != nullptr && !(v->is_string() && (*v == "none" || (endpoint == OpenAiEndpoint::kResponses && *v == "auto")))) {
    return Refuse("tool_choice", "tools and function calling are not supported");
  }
  if (const json* v = Find(body, "logit_bias"); v != nullptr && !(v->is_object() && v->empty())) {
    return Refuse("logit_bias", "is not supported");
  }
  for (const char* penalty : {"presence_penalty", "frequency_penalty"}) {
    ASSIGN_OR_RETURN(auto p, GetNumber(body, penalty));
    if (p && *p != 0) return Refuse(penalty, "is not supported (only 0)");
  }
  ASSIGN_OR_RETURN(auto repetition, GetNumber(body, "repetition_penalty"));
  if (repetition && *repetition != 1) return Refuse("repetition_penalty", "is not supported (only 1)");
  if (const json* v = Find(body, "response_format"); v != nullptr) {
    if (!v->is_object() || v->value("type", "") != "text") {
      return Refuse("response_format", "only {\"type\": \"text\"} is supported");
    }
  }
  if (endpoint == OpenAiEndpoint::kCompletions) {
    ASSIGN_OR_RETURN(auto echo, GetBool(body, "echo"));
    if (echo.value_or(false)) return Refuse("echo", "is not supported");
    ASSIGN_OR_RETURN(auto best_of, GetInt(body, "best_of", 1, kIntMax));
    if (best_of && *best_of != 1) return Refuse("best_of", "only 1 is supported");
    if (const json* v = Find(body, "suffix"); v != nullptr && !(v->is_string() && v->get<std::string>().empty())) {
      return Refuse("suffix", "is not supported");
    }
  }
  return Status::Ok();
}

Status ReadLogprobs(const json& body, OpenAiRequest* r) {
  if (r->endpoint == OpenAiEndpoint::kCompletions) {
    // Completions: `logprobs` is the number of alternatives (0: only the chosen token's).
    ASSIGN_OR_RETURN(auto n, GetInt(body, "logprobs", 0, kIntMax));
    r->logprobs = n.has_value();
    r->top_logprobs = static_cast<int>(n.value_or(0));
  } else {
    ASSIGN_OR_RETURN(auto on, GetBool(body, "logprobs"));
    ASSIGN_OR_RETURN(auto n, GetInt(body, "top_logprobs", 0, kIntMax));
    if (n && *n > 0 && !on.value_or(false)) return Refuse("top_logprobs", "needs logprobs: true");
    r->logprobs = on.value_or(false);
    r->top_logprobs = static_cast<int>(n.value_or(0));
  }
  // The engine reports the chosen token's logprob only while it computes alternatives.
  if (r->logprobs) r->generate.set_logprobs(std::max(1, r->top_logprobs));
  return Status::Ok();
}

Status ReadSampling(const json& body, v1::GenerateRequest* g) {
  v1::SamplingParams* s = g->mutable_sampling();
  ASSIGN_OR_RETURN(auto temperature, GetNumber(body, "temperature"));
  s->set_temperature(static_cast<float>(temperature.value_or(1.0)));  // OpenAI's default
  ASSIGN_OR_RETURN(auto top_p, GetNumber(body, "top_p"));
  // gRPC reads top_p 0 as "unset" (proto3's default); here 0 was sent, and means nothing sampleable.
  if (top_p && *top_p == 0) return Refuse("top_p", "must be in (0, 1], got 0 (temperature 0 is greedy)");
  s->set_top_p(static_cast<float>(top_p.value_or(1.0)));
  ASSIGN_OR_RETURN(auto top_k, GetInt(body, "top_k", -1, kIntMax));  // vLLM's -1: no limit
  s->set_top_k(static_cast<int32_t>(std::max<int64_t>(0, top_k.value_or(0))));
  // Any 64-bit integer, as OpenAI takes: the 64-bit seed is its two's complement bits (-1 is
  // 2^64 - 1). None: the server draws one for this request.
  ASSIGN_OR_RETURN(auto seed, GetInt(body, "seed", std::numeric_limits<int64_t>::min(),
                                     std::numeric_limits<int64_t>::max()));
  if (seed) s->set_seed(static_cast<uint64_t>(*seed));
  return Status::Ok();
}

Status ReadLengths(const json& body, OpenAiRequest* r) {
  // Responses names it max_output_tokens; left out, like chat's, it is what the context has left.
  const bool responses = r->endpoint == OpenAiEndpoint::kResponses;
  ASSIGN_OR_RETURN(auto max_tokens, GetInt(body, responses ? "max_output_tokens" : "max_tokens", 1, kIntMax));
  if (r->endpoint == OpenAiEndpoint::kChatCompletions) {
    ASSIGN_OR_RETURN(auto max_completion, GetInt(body, "max_completion_tokens", 1, kIntMax));
    if (max_completion) max_tokens = max_completion;
  } else if (!max_tokens && !responses) {
    max_tokens = 16;  // OpenAI's default for completions
  }
  r->generate.set_max_tokens(static_cast<int32_t>(max_tokens.value_or(0)));
  ASSIGN_OR_RETURN(auto min_tokens, GetInt(body, "min_tokens", 0, kIntMax));
  r->generate.set_min_tokens(static_cast<int32_t>(min_tokens.value_or(0)));
  ASSIGN_OR_RETURN(auto ignore_eos, GetBool(body, "ignore_eos"));
  r->generate.set_ignore_eos(ignore_eos.value_or(false));
  if (const json* ids = Find(body, "stop_token_ids"); ids != nullptr) {
    if (!ids->is_array()) return Refuse("stop_token_ids", "must be an array of token ids");
    for (const json& id : *ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kIntMax) {
        return Refuse("stop_token_ids", "token ids must be non-negative integers, got " + DescribeJsonForError(id));
      }
      r->generate.add_stop_token_ids(static_cast<int32_t>(id.get<int64_t>()));
    }
  }
  return Status::Ok();
}

}  // namespace

std::string OpenAiParamOf(const Status& status) {
  const std::string& m = status.message();
  const size_t colon = m.find(':');
  if (colon == std::string::npos) return std::string();
  // The shared validation names sampling fields as the gRPC request nests them.
  constexpr std::string_view kNested = "sampling.";
  const size_t from = m.compare(0, kNested.size(), kNested) == 0 ? kNested.size() : 0;
  return m.substr(from, colon - from);
}

Result<OpenAiRequest> ParseOpenAiRequest(OpenAiEndpoint endpoint, std::string_view body) {
  // Bounded nesting: the messages below are copied, and values are described in errors.
  ASSIGN_OR_RETURN(json parsed, ParseJson<json>(body, "body"));
  if (!parsed.is_object()) return InvalidArgument("body: must be a JSON object, got " + TypeName(parsed));
  OpenAiRequest r;
  r.endpoint = endpoint;
  if (const json* model = Find(parsed, "model"); model != nullptr) {
    if (!model->is_string()) return Refuse("model", "must be a string, got " + TypeName(*model));
    r.model = model->get<std::string>();
  }
  RETURN_IF_ERROR(RefuseUnsupported(parsed, endpoint));
  std::vector<v1::GenerateRequest> prompts;
  if (endpoint == OpenAiEndpoint::kCompletions) {
    ASSIGN_OR_RETURN(prompts, ReadPrompts(parsed));
  } else if (endpoint == OpenAiEndpoint::kChatCompletions) {
    ASSIGN_OR_RETURN(r.messages, ReadMessages(parsed));
  } else {
    RETURN_IF_ERROR(RefuseUnsupportedResponses(parsed));
    ASSIGN_OR_RETURN(r.messages, ReadResponsesInput(parsed));
    if (const json* instructions = Find(parsed, "instructions"); instructions != nullptr) {
      r.instructions = instructions->get<std::string>();  // a string: ReadResponsesInput checked
    }
  }
  RETURN_IF_ERROR(ReadLengths(parsed, &r));
  if (endpoint == OpenAiEndpoint::kResponses) r.max_output_tokens = r.generate.max_tokens();
  RETURN_IF_ERROR(ReadSampling(parsed, &r.generate));
  if (endpoint != OpenAiEndpoint::kResponses) {  // the Responses API has neither
    RETURN_IF_ERROR(ReadStop(parsed, &r.generate));
    RETURN_IF_ERROR(ReadLogprobs(parsed, &r));
  }
  ASSIGN_OR_RETURN(auto stream, GetBool(parsed, "stream"));
  r.stream = stream.value_or(false);
  if (const json* options = Find(parsed, "stream_options"); options != nullptr) {
    if (!r.stream) return Refuse("stream_options", "is only allowed with stream: true");
    if (!options->is_object()) return Refuse("stream_options", "must be an object, got " + TypeName(*options));
    ASSIGN_OR_RETURN(auto usage, GetBool(*options, "include_usage"));
    r.include_usage = usage.value_or(false);
  }
  for (v1::GenerateRequest& prompt : prompts) {
    v1::GenerateRequest& full = r.prompts.emplace_back(r.generate);
    full.MergeFrom(prompt);  // the oneof prompt
  }
  return r;
}

}  // namespace tpserve
