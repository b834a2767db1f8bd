#include "server/http/openai_request.h"

#include <cmath>
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

// Completions' `prompt`: a string, an array of one string, an array of token ids, or an array of
// one array of token ids. More than one prompt is a batch, which tpserve serves one per request.
Status ReadPrompt(const json& body, v1::GenerateRequest* out) {
  const json* v = Find(body, "prompt");
  if (v == nullptr) return Refuse("prompt", "is required");
  const json* single = v;
  if (v->is_array() && !v->empty() && (v->front().is_string() || v->front().is_array())) {
    if (v->size() != 1) {
      return Refuse("prompt", "a batch of " + std::to_string(v->size()) +
                                  " prompts is not supported; send one request per prompt");
    }
    single = &v->front();
  }
  if (single->is_string()) {
    out->set_text(single->get<std::string>());
    return Status::Ok();
  }
  if (!single->is_array()) return Refuse("prompt", "must be a string or an array of token ids, got " + TypeName(*single));
  if (single->empty()) return Refuse("prompt", "is empty");
  for (const json& id : *single) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kIntMax) {
      return Refuse("prompt", "token ids must be non-negative integers, got " + DescribeJsonForError(id));
    }
    out->mutable_token_ids()->add_ids(static_cast<int32_t>(id.get<int64_t>()));
  }
  return Status::Ok();
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
    json out = m;
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      out["content"] = "";
    } else if (content->is_array()) {
      std::string joined;
      for (size_t p = 0; p < content->size(); ++p) {
        const json& part = (*content)[p];
        const std::string part_where = where + ".content[" + std::to_string(p) + "]";
        if (!part.is_object()) return Refuse(part_where, "must be an object, got " + TypeName(part));
        auto type = part.find("type");
        if (type == part.end() || !type->is_string()) return Refuse(part_where + ".type", "must be a string");
        if (*type != "text") return Refuse(part_where + ".type", "'" + type->get<std::string>() + "' is not supported (text only)");
        auto text = part.find("text");
        if (text == part.end() || !text->is_string()) return Refuse(part_where + ".text", "must be a string");
        joined += text->get<std::string>();
      }
      out["content"] = std::move(joined);
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

// Fields whose every value but the neutral one asks for what tpserve does not do.
Status RefuseUnsupported(const json& body, OpenAiEndpoint endpoint) {
  ASSIGN_OR_RETURN(auto n, GetInt(body, "n", 1, kIntMax));
  if (n && *n != 1) return Refuse("n", "only n = 1 is supported; send n requests");
  for (const char* list : {"tools", "functions"}) {
    if (const json* v = Find(body, list); v != nullptr && !(v->is_array() && v->empty())) {
      return Refuse(list, "tools and function calling are not supported");
    }
  }
  if (const json* v = Find(body, "tool_choice"); v != nullptr && !(v->is_string() && *v == "none")) {
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
  s->set_top_p(static_cast<float>(top_p.value_or(1.0)));
  ASSIGN_OR_RETURN(auto top_k, GetInt(body, "top_k", -1, kIntMax));  // vLLM's -1: no limit
  s->set_top_k(static_cast<int32_t>(std::max<int64_t>(0, top_k.value_or(0))));
  ASSIGN_OR_RETURN(auto seed, GetInt(body, "seed", 0, std::numeric_limits<int64_t>::max()));
  s->set_seed(static_cast<uint64_t>(seed.value_or(0)));
  return Status::Ok();
}

Status ReadLengths(const json& body, OpenAiRequest* r) {
  ASSIGN_OR_RETURN(auto max_tokens, GetInt(body, "max_tokens", 1, kIntMax));
  if (r->endpoint == OpenAiEndpoint::kChatCompletions) {
    ASSIGN_OR_RETURN(auto max_completion, GetInt(body, "max_completion_tokens", 1, kIntMax));
    if (max_completion) max_tokens = max_completion;
  } else if (!max_tokens) {
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
  if (endpoint == OpenAiEndpoint::kCompletions) {
    RETURN_IF_ERROR(ReadPrompt(parsed, &r.generate));
  } else {
    ASSIGN_OR_RETURN(r.messages, ReadMessages(parsed));
  }
  RETURN_IF_ERROR(ReadLengths(parsed, &r));
  RETURN_IF_ERROR(ReadSampling(parsed, &r.generate));
  RETURN_IF_ERROR(ReadStop(parsed, &r.generate));
  RETURN_IF_ERROR(ReadLogprobs(parsed, &r));
  ASSIGN_OR_RETURN(auto stream, GetBool(parsed, "stream"));
  r.stream = stream.value_or(false);
  if (const json* options = Find(parsed, "stream_options"); options != nullptr) {
    if (!options->is_object()) return Refuse("stream_options", "must be an object, got " + TypeName(*options));
    ASSIGN_OR_RETURN(auto usage, GetBool(*options, "include_usage"));
    r.include_usage = usage.value_or(false);
  }
  return r;
}

}  // namespace tpserve
