// An OpenAI request body off the wire (what any HTTP client can send), first byte choosing the
// endpoint: ParseOpenAiRequest, then the gRPC service's Validate against the tiny model, then
// the response objects built from what it asked for. A refusal is INVALID_ARGUMENT naming a
// parameter; an accepted request fits the limits; every JSON the server would send parses back.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string_view>

#include "server/grpc_service.h"
#include "server/http/openai_request.h"
#include "server/http/openai_response.h"
#include "server/http/openai_responses.h"
#include "tests/fuzz/fuzz_tiny_model.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

const tpserve::TpServeService& Service() {
  static tpserve::EngineLoopOptions loop_options;
  static tpserve::ServiceLimits limits{.max_model_len = 2048};
  static tpserve::TpServeService service(&tpserve::FuzzTinyModel(), nullptr, nullptr, nullptr, loop_options, limits);
  return service;
}

void CheckParses(const std::string& text) {
  FUZZ_CHECK(nlohmann::json::accept(text), "the server would send JSON that does not parse");
}

// Server-sent events "event: TYPE\ndata: JSON\n\n": every data line parses.
void CheckEvents(const std::string& events) {
  size_t at = 0;
  while ((at = events.find("data: ", at)) != std::string::npos) {
    const size_t end = events.find("\n\n", at);
    FUZZ_CHECK(end != std::string::npos, "an unterminated event");
    CheckParses(events.substr(at + 6, end - at - 6));
    at = end;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto endpoint = data[0] % 3 == 0   ? tpserve::OpenAiEndpoint::kCompletions
                        : data[0] % 3 == 1 ? tpserve::OpenAiEndpoint::kChatCompletions
                                           : tpserve::OpenAiEndpoint::kResponses;
  auto parsed = tpserve::ParseOpenAiRequest(endpoint, {reinterpret_cast<const char*>(data) + 1, size - 1});
  if (!parsed.ok()) {
    FUZZ_CHECK(parsed.status().code() == tpserve::StatusCode::kInvalidArgument, "a refusal that is not a 400");
    FUZZ_CHECK(!tpserve::OpenAiParamOf(parsed.status()).empty(), "a refusal that names no parameter");
    CheckParses(tpserve::OpenAiErrorBody(parsed.status()));
    return 0;
  }
  FUZZ_CHECK(parsed->top_logprobs >= 0, "negative top_logprobs");
  if (endpoint != tpserve::OpenAiEndpoint::kCompletions) {
    FUZZ_CHECK(!parsed->messages.empty(), "a chat or responses request without messages");
    for (const auto& m : parsed->messages) FUZZ_CHECK(m["content"].is_string(), "content not joined into a string");
    if (endpoint == tpserve::OpenAiEndpoint::kResponses) {
      tpserve::ResponsesApiBuilder builder({.id = "resp_1", .message_id = "msg_1", .model = "tiny",
                                            .instructions = parsed->instructions,
                                            .max_output_tokens = parsed->max_output_tokens});
      const std::string text = parsed->messages.back()["content"].get<std::string>();
      CheckEvents(builder.StartEvents() + builder.DeltaEvent(text) + builder.FinishEvents(text, "length", {1, 2}));
      CheckParses(builder.Whole(text, "stop", {1, 2}));
    }
    return 0;  // the prompt comes from the chat template (fuzzed on its own)
  }
  FUZZ_CHECK(!parsed->prompts.empty() && parsed->prompts.size() <= tpserve::kMaxPromptsPerRequest,
             "a completions request with no prompt or too many");
  for (size_t i = 0; i < parsed->prompts.size(); ++i) {
    auto accepted = Service().Validate(parsed->prompts[i]);
    if (!accepted.ok()) {
      CheckParses(tpserve::OpenAiErrorBody(accepted.status()));
      continue;
    }
    FUZZ_CHECK(accepted->prompt.size() + static_cast<size_t>(accepted->max_tokens) <= 2048, "over max_model_len");
    // The response objects for what was asked, with the prompt's ids standing in for output tokens.
    tpserve::OpenAiResponseBuilder builder({.endpoint = endpoint, .id = "cmpl-1", .created = 1, .model = "tiny"},
                                           &tpserve::FuzzTinyModel().tokenizer, parsed->logprobs,
                                           parsed->top_logprobs, static_cast<int>(i));
    std::vector<tpserve::SampledToken> tokens;
    for (int32_t id : accepted->prompt) tokens.push_back({.id = id, .logprob = -1.0f, .top = {{id, -1.0f}}});
    const std::string text = parsed->prompts[i].text();
    CheckParses(builder.Chunk(text, tokens));
    CheckParses(builder.FinishChunk("stop"));
    CheckParses(builder.UsageChunk({1, 2}));
    CheckParses(builder.Whole({builder.FinishedChoice(text, tokens, "length")}, {1, 2}));
  }
  return 0;
}
