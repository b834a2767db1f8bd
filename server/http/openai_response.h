// OpenAI's response objects for completions and chat completions: the whole response, the
// streamed chunks (server-sent events: "data: JSON\n\n", then "data: [DONE]\n\n"), logprobs in
// each endpoint's format, and the error object with its HTTP status. No I/O.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/step/sampler.h"
#include "text/tokenizer/tokenizer.h"
#include "server/http/openai_request.h"

namespace tpserve {

// What every object of one response shares.
struct OpenAiResponseHeader {
  OpenAiEndpoint endpoint = OpenAiEndpoint::kCompletions;
  std::string id;  // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;
  std::string model;
};

struct OpenAiUsage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
};

// Builds the JSON objects of one choice of a response (`choice_index`: its `index`; a completions
// request with a list of prompts has one choice per prompt). `logprobs`/`top_logprobs` as the
// request asked.
class OpenAiResponseBuilder {
 public:
  OpenAiResponseBuilder(OpenAiResponseHeader header, const Tokenizer* tokenizer, bool logprobs, int top_logprobs,
                        int choice_index = 0);

  // A streamed chunk with new text and the tokens it came from (chat: the first one also carries
  // the assistant role).
  std::string Chunk(std::string_view text, const std::vector<SampledToken>& tokens);
  // The chunk that ends the choice (empty text, its finish_reason).
  std::string FinishChunk(std::string_view finish_reason);
  // stream_options.include_usage: the last chunk, with no choices.
  std::string UsageChunk(const OpenAiUsage& usage) const;
  // The finished choice of a non-streamed response ...
  nlohmann::ordered_json FinishedChoice(std::string_view text, const std::vector<SampledToken>& tokens,
                                        std::string_view finish_reason);
  // ... and the response around the choices (every choice's usage summed).
  std::string Whole(std::vector<nlohmann::ordered_json> choices, const OpenAiUsage& usage) const;

 private:
  nlohmann::ordered_json Object(std::string_view object) const;
  nlohmann::ordered_json Choice(std::string_view text, const std::vector<SampledToken>& tokens, bool delta);
  nlohmann::ordered_json Logprobs(const std::vector<SampledToken>& tokens);
  nlohmann::ordered_json TokenEntry(int32_t id, float logprob) const;  // chat: {token, logprob, bytes}

  OpenAiResponseHeader header_;
  const Tokenizer* tokenizer_;
  bool logprobs_;
  int top_logprobs_;
  int choice_index_;
  bool role_sent_ = false;
  size_t text_offset_ = 0;  // completions' text_offset of the next token
};

// One server-sent event: "data: " + payload + "\n\n".
std::string SseEvent(std::string_view payload);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// JSON text that never throws: invalid UTF-8 becomes U+FFFD.
std::string DumpJson(const nlohmann::json& value);
std::string DumpJson(const nlohmann::ordered_json& value);

// An error as OpenAI sends it: {"error": {"message", "type", "param", "code"}}; and its HTTP status.
int HttpStatusOf(StatusCode code);
std::string OpenAiErrorBody(const Status& status);

}  // namespace tpserve
