// The bodies of OpenAI's POST /v1/completions, /v1/chat/completions and /v1/responses, read into the gRPC
// request that tpserve's one validation checks (TpServeService::Validate), plus what only the
// HTTP API has (streaming options, the chat messages, how to print logprobs). Unknown fields are
// ignored, as SDKs send them; a known field with a value tpserve does not support is refused
// naming the field. No I/O: fuzzed on its own.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "tpserve/v1/tpserve.pb.h"

namespace tpserve {

// POST /v1/completions, /v1/chat/completions, /v1/responses (the Responses API, text in and out).
enum class OpenAiEndpoint { kCompletions, kChatCompletions, kResponses };

// Completions' `prompt` may be a list: one choice per prompt, each its own engine request.
inline constexpr int kMaxPromptsPerRequest = 64;

// The roles a chat message may have (OpenAI's, less the deprecated "function").
inline constexpr std::string_view kChatRoles[] = {"system", "developer", "user", "assistant", "tool"};

struct OpenAiRequest {
  OpenAiEndpoint endpoint = OpenAiEndpoint::kCompletions;
  std::string model;
  // Everything but the prompt (chat: rendered from `messages` by the chat template into this).
  // max_tokens is 0 when the request left it to the server (chat: up to the context window).
  // sampling.seed is unset when the request sent none (the server draws one per request).
  v1::GenerateRequest generate;
  // The requests to run, one per choice: completions, `generate` with each prompt in turn, in the
  // order sent; chat and Responses, the rendered conversation (set by HttpApi once rendered).
  std::vector<v1::GenerateRequest> prompts;
  // Chat and Responses: [{"role": str, "content": str, ...}] with content parts joined into one
  // string (Responses: `instructions` first, as a system message).
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  // Responses: as sent, echoed in the response object.
  std::optional<std::string> instructions;
  int max_output_tokens = 0;  // 0: not sent
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage (non-streamed responses always have usage)
  bool logprobs = false;       // print the chosen tokens' logprobs ...
  int top_logprobs = 0;        // ... and this many alternatives per token
};

// The OpenAI parameter a refusal names: the text before the first ':' of its message.
std::string OpenAiParamOf(const Status& status);

// Parses and checks a request body. Errors are INVALID_ARGUMENT "PARAM: what is wrong".
Result<OpenAiRequest> ParseOpenAiRequest(OpenAiEndpoint endpoint, std::string_view body);

}  // namespace tpserve
