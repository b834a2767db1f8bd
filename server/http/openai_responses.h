// OpenAI's Responses API (POST /v1/responses) for text in and text out: the `response` object and
// its streamed events. Each event is a server-sent event with its type named twice, as OpenAI sends
// it ("event: TYPE\ndata: {\"type\": TYPE, \"sequence_number\": N, ...}\n\n"), in this order:
// response.created, response.in_progress, response.output_item.added, response.content_part.added,
// response.output_text.delta (one per engine step's text), response.output_text.done,
// response.content_part.done, response.output_item.done, then response.completed, or
// response.incomplete when max_output_tokens ran out or the server cancelled it. No [DONE]. No I/O.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "server/http/openai_response.h"

namespace tpserve {

struct ResponsesApiSettings {
  std::string id;          // "resp_..."
  std::string message_id;  // "msg_...": the one output message
  int64_t created_at = 0;
  std::string model;
  std::optional<std::string> instructions;
  int max_output_tokens = 0;  // as the request asked (0: none)
  float temperature = 1.0f;
  float top_p = 1.0f;
};

class ResponsesApiBuilder {
 public:
  explicit ResponsesApiBuilder(ResponsesApiSettings settings) : settings_(std::move(settings)) {}

  // response.created .. response.content_part.added: the response in progress, its empty message.
  std::string StartEvents();
  // response.output_text.delta with the new text.
  std::string DeltaEvent(std::string_view text);
  // response.output_text.done .. response.completed / response.incomplete, for the whole text.
  std::string FinishEvents(std::string_view text, std::string_view finish_reason, const OpenAiUsage& usage);
  // An error mid-stream: an `error` event (the SDKs raise it).
  std::string ErrorEvent(const Status& status);
  // The non-streamed response.
  std::string Whole(std::string_view text, std::string_view finish_reason, const OpenAiUsage& usage) const;

 private:
  nlohmann::ordered_json Response(std::string_view status, const nlohmann::ordered_json& output,
                                  std::string_view finish_reason, const OpenAiUsage* usage) const;
  nlohmann::ordered_json Message(std::string_view status, std::optional<std::string_view> text) const;
  std::string Event(std::string_view type, nlohmann::ordered_json fields);

  ResponsesApiSettings settings_;
  int sequence_number_ = 0;
};

// The `status` of a response that ended with engine finish reason `finish_reason` ("stop",
// "length", "abort"): completed, or incomplete (max_output_tokens, or cancelled by the server).
std::string_view ResponsesStatus(std::string_view finish_reason);

}  // namespace tpserve
