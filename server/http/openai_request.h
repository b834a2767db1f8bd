// The bodies of OpenAI's POST /v1/completions and /v1/chat/completions, read into the gRPC
// request that tpserve's one validation checks (TpServeService::Validate), plus what only the
// HTTP API has (streaming options, the chat messages, how to print logprobs). Unknown fields are
// ignored, as SDKs send them; a known field with a value tpserve does not support is refused
// naming the field. No I/O: fuzzed on its own.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "common/status.h"
#include "tpserve/v1/tpserve.pb.h"

namespace tpserve {

enum class OpenAiEndpoint { kCompletions, kChatCompletions };

struct OpenAiRequest {
  OpenAiEndpoint endpoint = OpenAiEndpoint::kCompletions;
  std::string model;
  // Everything but, for chat, the prompt (rendered from `messages` by the chat template).
  // max_tokens is 0 when the request left it to the server (chat: up to the context window).
  v1::GenerateRequest generate;
  // Chat: [{"role": str, "content": str, ...}] with content parts joined into one string.
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
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
