#include "server/http/openai_responses.h"

namespace tpserve {
namespace {

using json = nlohmann::ordered_json;  // OpenAI's field order

json OutputText(std::string_view text) {
  return json{{"type", "output_text"}, {"text", text}, {"annotations", json::array()}, {"logprobs", json::array()}};
}

json Usage(const OpenAiUsage& usage) {
  return json{{"input_tokens", usage.prompt_tokens},
              {"input_tokens_details", {{"cached_tokens", 0}}},
              {"output_tokens", usage.completion_tokens},
              {"output_tokens_details", {{"reasoning_tokens", 0}}},
              {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
}

}  // namespace

std::string_view ResponsesStatus(std::string_view finish_reason) {
  return finish_reason == "stop" ? "completed" : "incomplete";
}

json ResponsesApiBuilder::Message(std::string_view status, std::optional<std::string_view> text) const {
  return json{{"type", "message"},
              {"id", settings_.message_id},
              {"status", status},
              {"role", "assistant"},
              {"content", text ? json::array({OutputText(*text)}) : json::array()}};
}

json ResponsesApiBuilder::Response(std::string_view status, const json& output, std::string_view finish_reason,
                                   const OpenAiUsage* usage) const {
  json incomplete = nullptr;
  if (status == "incomplete") {
    incomplete = json{{"reason", finish_reason == "length" ? "max_output_tokens" : "cancelled"}};
  }
  return json{{"id", settings_.id},
              {"object", "response"},
              {"created_at", settings_.created_at},
              {"status", status},
              {"error", nullptr},
              {"incomplete_details", std::move(incomplete)},
              {"instructions", settings_.instructions ? json(*settings_.instructions) : json(nullptr)},
              {"max_output_tokens", settings_.max_output_tokens > 0 ? json(settings_.max_output_tokens) : json(nullptr)},
              {"model", settings_.model},
              {"output", output},
              {"parallel_tool_calls", false},
              {"previous_response_id", nullptr},
              {"store", false},
              {"temperature", settings_.temperature},
              {"text", {{"format", {{"type", "text"}}}}},
              {"tool_choice", "none"},
              {"tools", json::array()},
              {"top_p", settings_.top_p},
              {"usage", usage != nullptr ? Usage(*usage) : json(nullptr)},
              {"metadata", json::object()}};
}

std::string ResponsesApiBuilder::Event(std::string_view type, json fields) {
  json event{{"type", type}, {"sequence_number", sequence_number_++}};
  for (auto& [key, value] : fields.items()) event[key] = std::move(value);
  std::string out = "event: ";
  out.append(type).append("\n");
  return out + SseEvent(DumpJson(event));
}

std::string ResponsesApiBuilder::StartEvents() {
  const json in_progress = Response("in_progress", json::array(), "", nullptr);
  std::string events = Event("response.created", json{{"response", in_progress}});
  events += Event("response.in_progress", json{{"response", in_progress}});
  events += Event("response.output_item.added",
                  json{{"output_index", 0}, {"item", Message("in_progress", std::nullopt)}});
  events += Event("response.content_part.added", json{{"item_id", settings_.message_id},
                                                      {"output_index", 0},
                                                      {"content_index", 0},
                                                      {"part", OutputText("")}});
  return events;
}

std::string ResponsesApiBuilder::DeltaEvent(std::string_view text) {
  return Event("response.output_text.delta", json{{"item_id", settings_.message_id},
                                                  {"output_index", 0},
                                                  {"content_index", 0},
                                                  {"delta", text},
                                                  {"logprobs", json::array()}});
}

std::string ResponsesApiBuilder::FinishEvents(std::string_view text, std::string_view finish_reason,
                                              const OpenAiUsage& usage) {
  const std::string_view status = ResponsesStatus(finish_reason);
  std::string events = Event("response.output_text.done", json{{"item_id", settings_.message_id},
                                                              {"output_index", 0},
                                                              {"content_index", 0},
                                                              {"text", text},
                                                              {"logprobs", json::array()}});
  events += Event("response.content_part.done", json{{"item_id", settings_.message_id},
                                                    {"output_index", 0},
                                                    {"content_index", 0},
                                                    {"part", OutputText(text)}});
  const json message = Message("completed", text);
  events += Event("response.output_item.done", json{{"output_index", 0}, {"item", message}});
  const json response = Response(status, json::array({message}), finish_reason, &usage);
  events += Event(status == "completed" ? "response.completed" : "response.incomplete", json{{"response", response}});
  return events;
}

std::string ResponsesApiBuilder::ErrorEvent(const Status& status) {
  const std::string param = OpenAiParamOf(status);
  return Event("error", json{{"code", std::string(StatusCodeName(status.code()))},
                             {"message", status.message()},
                             {"param", param.empty() ? json(nullptr) : json(param)}});
}

std::string ResponsesApiBuilder::Whole(std::string_view text, std::string_view finish_reason,
                                       const OpenAiUsage& usage) const {
  return DumpJson(Response(ResponsesStatus(finish_reason), json::array({Message("completed", text)}), finish_reason,
                           &usage));
}

}  // namespace tpserve
