// What loadgen sends to and reads from an OpenAI-compatible server (tpserve's HTTP API, vLLM,
// SGLang): the streamed request body, the meaning of each streamed chunk, the error object, the
// model list. No I/O: tested and fuzzed on its own.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "clients/load_target.h"
#include "common/status.h"

namespace tpserve {

enum class OpenAiRoute { kCompletions, kChatCompletions };

// POST /v1/completions or /v1/chat/completions, streamed, greedy (as gRPC mode's default), with
// usage in the last chunk and the output length fixed through ignore_eos + min_tokens = max_tokens
// (vLLM's and SGLang's extensions). A random prompt goes to completions as token ids and to chat
// as one user message of PromptWords.
std::string OpenAiRequestBody(OpenAiRoute route, const std::string& model, const LoadRequest& request);

// Chat takes text only: each token id becomes one common English word, which the tokenizers of
// the usual model families (Llama, Mistral, Qwen, GPT-2) read as one token. The chat template
// adds its own tokens around it.
std::string PromptWords(const std::vector<int32_t>& ids);

// One streamed chunk's `data:` payload (not the [DONE] terminator).
struct OpenAiChunk {
  bool content = false;                  // carries generated text (a role-only or finish chunk does not)
  std::optional<int> completion_tokens;  // usage.completion_tokens, where the chunk has usage
  std::string error;                     // an error object sent in the stream: its message
};
Result<OpenAiChunk> ParseOpenAiChunk(std::string_view data);

// The message of an error body ({"error": {"message": ...}} as OpenAI, vLLM and tpserve send it;
// {"detail": ...} or {"message": ...} as some frameworks do), else the body's first line, cut short.
std::string OpenAiErrorMessage(std::string_view body);

// --server for an OpenAI-compatible server: http(s)://HOST:PORT, optionally with a path prefix
// (a proxy's) and the SDKs' trailing /v1, which the request paths add themselves.
struct OpenAiServerUrl {
  std::string origin;  // "http://127.0.0.1:8000", what httplib::Client takes
  std::string prefix;  // "" or "/proxy", put before "/v1/..."
  bool tls = false;
};
Result<OpenAiServerUrl> ParseOpenAiServerUrl(std::string_view url);

// GET /v1/models: the first model's id.
Result<std::string> FirstModelId(std::string_view body);

}  // namespace tpserve
