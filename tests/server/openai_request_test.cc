// OpenAI request bodies read into the gRPC request: OpenAI's defaults, the accepted forms of each
// field, and a refusal naming the parameter for every value tpserve does not support.
#include <gtest/gtest.h>

#include "server/http/openai_request.h"
#include "server/http/openai_response.h"

namespace tpserve {
namespace {

OpenAiRequest Parse(OpenAiEndpoint endpoint, std::string_view body) {
  auto parsed = ParseOpenAiRequest(endpoint, body);
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  return parsed.ok() ? std::move(parsed).value() : OpenAiRequest();
}

std::string RefusedParam(OpenAiEndpoint endpoint, std::string_view body) {
  auto parsed = ParseOpenAiRequest(endpoint, body);
  EXPECT_FALSE(parsed.ok()) << body;
  if (parsed.ok()) return "";
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  return OpenAiParamOf(parsed.status());
}

constexpr auto kCompletions = OpenAiEndpoint::kCompletions;
constexpr auto kChat = OpenAiEndpoint::kChatCompletions;

TEST(OpenAiRequest, CompletionDefaultsAreOpenAis) {
  const OpenAiRequest r = Parse(kCompletions, R"({"model": "m", "prompt": "Hello"})");
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].text(), "Hello");
  EXPECT_EQ(r.prompts[0].max_tokens(), 16);
  EXPECT_EQ(r.generate.max_tokens(), 16);
  EXPECT_FLOAT_EQ(r.generate.sampling().temperature(), 1.0f);
  EXPECT_FLOAT_EQ(r.generate.sampling().top_p(), 1.0f);
  EXPECT_FALSE(r.generate.sampling().has_seed());  // the server draws one
  EXPECT_EQ(r.generate.logprobs(), 0);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.logprobs);
}

TEST(OpenAiRequest, FieldsAndExtensionsMapOntoTheGrpcRequest) {
  const OpenAiRequest r = Parse(kCompletions, R"({"prompt": [[1, 2, 3]], "max_tokens": 7.0, "temperature": 0,
      "top_p": 0.5, "top_k": -1, "seed": 42, "stop": "\n", "min_tokens": 3, "ignore_eos": true,
      "stop_token_ids": [9], "logprobs": 0, "stream": true, "stream_options": {"include_usage": true},
      "user": "someone", "unknown_field": {"ignored": [1]}, "n": 1, "presence_penalty": 0})");
  ASSERT_EQ(r.prompts.size(), 1u);
  ASSERT_EQ(r.prompts[0].token_ids().ids_size(), 3);
  EXPECT_EQ(r.prompts[0].token_ids().ids(2), 3);
  EXPECT_EQ(r.prompts[0].sampling().seed(), 42u);
  EXPECT_EQ(r.generate.max_tokens(), 7);
  EXPECT_EQ(r.generate.sampling().top_k(), 0);
  EXPECT_EQ(r.generate.sampling().seed(), 42u);
  ASSERT_EQ(r.generate.stop_size(), 1);
  EXPECT_EQ(r.generate.stop(0), "\n");
  EXPECT_EQ(r.generate.min_tokens(), 3);
  EXPECT_TRUE(r.generate.ignore_eos());
  EXPECT_EQ(r.generate.stop_token_ids(0), 9);
  // logprobs 0: the chosen token's logprob, no alternatives (the engine computes at least one).
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 0);
  EXPECT_EQ(r.generate.logprobs(), 1);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(OpenAiRequest, ChatJoinsTextPartsAndLeavesMaxTokensToTheServer) {
  const OpenAiRequest r = Parse(kChat, R"({"messages": [{"role": "user", "name": "a",
      "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]},
      {"role": "assistant", "content": null}], "logprobs": true, "top_logprobs": 4})");
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0]["content"], "Hi there");
  EXPECT_EQ(r.messages[0]["name"], "a");
  EXPECT_EQ(r.messages[1]["content"], "");
  EXPECT_EQ(r.generate.max_tokens(), 0);
  EXPECT_EQ(r.generate.logprobs(), 4);
  EXPECT_EQ(Parse(kChat, R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 3,
      "max_completion_tokens": 5})").generate.max_tokens(), 5);
}

TEST(OpenAiRequest, UnsupportedValuesAndWrongTypesNameTheirParameter) {
  EXPECT_EQ(RefusedParam(kCompletions, "{"), "body");
  EXPECT_EQ(RefusedParam(kCompletions, "\"text\""), "body");
  EXPECT_EQ(RefusedParam(kCompletions, "{}"), "prompt");
  EXPECT_EQ(RefusedParam(kCompletions, R"({"prompt": []})"), "prompt");
  EXPECT_EQ(RefusedParam(kCompletions, R"({"prompt": [1.5]})"), "prompt");
  EXPECT_EQ(RefusedParam(kCompletions, R"({"prompt": "x", "model": 3})"), "model");
  EXPECT_EQ(RefusedParam(kCompletions, R"({"prompt": "x", "max_tokens": 0})"), "max_tokens");
  EXPECT_EQ(RefusedParam(kCompletions, R"({"prompt": "x", "max_tokens": 1e300})"), "max_tokens");
  EXPECT_EQ(RefusedParam(kCompletions, R"({"prompt": "x", "max_tokens": 18446744073709551615})"), "max_tokens");
  EXPECT_EQ(RefusedParam(kCompletions, R"({"prompt": "x", "seed": 1.5})"), "seed");
  EXPECT_EQ(RefusedParam(kCompletions, R"({"prompt": "x", "seed": 1e19})"), "seed");
  EXPECT_EQ(RefusedParam(kCompletions, R"({"prompt": "x", "top_p": 0})"), "top_p");
  EXPECT_EQ(RefusedParam(kCompletions, R"({"prompt": "x", "stream_options": {"include_usage": true}})"),
            "stream_options");
  EXPECT_EQ(RefusedParam(kCompletions, R"({"prompt": "x", "stream": false, "stream_options": {}})"),
            "stream_options");
  EXPECT_EQ(RefusedParam(kCompletions, R"({"prompt": "x", "top_k": -2})"), "top_k");
  EXPECT_EQ(RefusedParam(kCompletions, R"({"prompt": "x", "temperature": true})"), "temperature");
  EXPECT_EQ(RefusedParam(kCompletions, R"({"prompt": "x", "stop": {"a": 1}})"), "stop");
  EXPECT_EQ(RefusedParam(kCompletions, R"({"prompt": "x", "echo": true})"), "echo");
  EXPECT_EQ(RefusedParam(kCompletions, R"({"prompt": "x", "best_of": 3})"), "best_of");
  EXPECT_EQ(RefusedParam(kCompletions, R"({"prompt": "x", "suffix": "y"})"), "suffix");
  EXPECT_EQ(RefusedParam(kCompletions, R"({"prompt": "x", "n": 4})"), "n");
  EXPECT_EQ(RefusedParam(kCompletions, R"({"prompt": "x", "logit_bias": {"1": 5}})"), "logit_bias");
  EXPECT_EQ(RefusedParam(kCompletions, R"({"prompt": "x", "frequency_penalty": 1})"), "frequency_penalty");
  EXPECT_EQ(RefusedParam(kCompletions, R"({"prompt": "x", "stream_options": 1})"), "stream_options");
  EXPECT_EQ(RefusedParam(kChat, R"({"messages": "hi"})"), "messages");
  EXPECT_EQ(RefusedParam(kChat, R"({"messages": [{"role": 1, "content": "x"}]})"), "messages[0].role");
  EXPECT_EQ(RefusedParam(kChat, R"({"messages": [{"role": "user", "content": 5}]})"), "messages[0].content");
  EXPECT_EQ(RefusedParam(kChat, R"({"messages": [{"role": "user", "content": "x", "tool_calls": [{}]}]})"),
            "messages[0].tool_calls");
  EXPECT_EQ(RefusedParam(kChat, R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "auto"})"),
            "tool_choice");
  EXPECT_EQ(RefusedParam(kChat, R"({"messages": [{"role": "user", "content": "x"}],
      "response_format": {"type": "json_object"}})"), "response_format");
  EXPECT_EQ(RefusedParam(kChat, R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 2})"), "logprobs");
}

TEST(OpenAiRequest, AListOfPromptsIsOneRequestEachInOrder) {
  const OpenAiRequest r = Parse(kCompletions, R"({"prompt": ["a", "bb", "ccc"], "max_tokens": 3, "seed": 7,
      "temperature": 0.5})");
  ASSERT_EQ(r.prompts.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(r.prompts[i].text(), std::string(i + 1, static_cast<char>('a' + i)));
    EXPECT_EQ(r.prompts[i].max_tokens(), 3);
    EXPECT_EQ(r.prompts[i].sampling().seed(), 7u);
    EXPECT_FLOAT_EQ(r.prompts[i].sampling().temperature(), 0.5f);
  }
  const OpenAiRequest ids = Parse(kCompletions, R"({"prompt": [[1, 2], [3]]})");
  ASSERT_EQ(ids.prompts.size(), 2u);
  EXPECT_EQ(ids.prompts[0].token_ids().ids_size(), 2);
  EXPECT_EQ(ids.prompts[1].token_ids().ids(0), 3);
  // A list mixes no kinds, holds no empty prompt, and has a cap.
  EXPECT_EQ(RefusedParam(kCompletions, R"({"prompt": ["a", [1]]})"), "prompt[1]");
  EXPECT_EQ(RefusedParam(kCompletions, R"({"prompt": [[1], []]})"), "prompt[1]");
  EXPECT_EQ(RefusedParam(kCompletions, R"({"prompt": []})"), "prompt");
  nlohmann::json many = {{"prompt", nlohmann::json::array()}};
  for (int i = 0; i <= kMaxPromptsPerRequest; ++i) many["prompt"].push_back("p");
  EXPECT_EQ(RefusedParam(kCompletions, many.dump()), "prompt");
  many["prompt"].erase(many["prompt"].begin());
  EXPECT_EQ(Parse(kCompletions, many.dump()).prompts.size(), static_cast<size_t>(kMaxPromptsPerRequest));
}

TEST(OpenAiRequest, ASeedIsAnyInt64MappedToItsBitsAndAbsentIsUnset) {
  auto seed_of = [](std::string_view seed) {
    const OpenAiRequest r = Parse(kCompletions, R"({"prompt": "x", "seed": )" + std::string(seed) + "}");
    EXPECT_TRUE(r.generate.sampling().has_seed()) << seed;
    return r.generate.sampling().seed();
  };
  EXPECT_EQ(seed_of("0"), 0u);  // sent: reproducible, not "draw one"
  EXPECT_EQ(seed_of("-1"), ~uint64_t{0});
  EXPECT_EQ(seed_of("-9223372036854775808"), uint64_t{1} << 63);
  EXPECT_EQ(seed_of("9223372036854775807"), (uint64_t{1} << 63) - 1);
  EXPECT_FALSE(Parse(kCompletions, R"({"prompt": "x", "seed": null})").generate.sampling().has_seed());
}

TEST(OpenAiRequest, ChatRolesAreOpenAisAndEchoedValuesAreCut) {
  for (const char* role : {"system", "developer", "user", "assistant", "tool"}) {
    Parse(kChat, R"({"messages": [{"role": ")" + std::string(role) + R"(", "content": "x"}]})");
  }
  EXPECT_EQ(RefusedParam(kChat, R"({"messages": [{"role": "bogus", "content": "x"}]})"), "messages[0].role");
  // A 100 kB role is named, not copied, in the error.
  const std::string huge(100000, 'r');
  auto parsed = ParseOpenAiRequest(kChat, R"({"messages": [{"role": ")" + huge + R"(", "content": "x"}]})");
  ASSERT_FALSE(parsed.ok());
  EXPECT_LT(parsed.status().message().size(), 200u) << parsed.status().message().substr(0, 300);
  auto part = ParseOpenAiRequest(kChat, R"({"messages": [{"role": "user", "content": [{"type": ")" + huge +
                                            R"(", "text": "x"}]}]})");
  ASSERT_FALSE(part.ok());
  EXPECT_LT(part.status().message().size(), 200u);
}

constexpr auto kResponses = OpenAiEndpoint::kResponses;

TEST(OpenAiRequest, ResponsesInputBecomesChatMessagesAfterTheInstructions) {
  const OpenAiRequest r = Parse(kResponses, R"({"model": "m", "instructions": "Be terse.", "input": [
      {"role": "user", "content": "Hi"},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello."}]},
      {"role": "user", "content": [{"type": "input_text", "text": "2+"}, {"type": "input_text", "text": "2?"}]}],
      "max_output_tokens": 9, "temperature": 0.5, "store": true, "tool_choice": "auto"})");
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0]["role"], "system");
  EXPECT_EQ(r.messages[0]["content"], "Be terse.");
  EXPECT_EQ(r.messages[2]["content"], "Hello.");
  EXPECT_EQ(r.messages[3]["content"], "2+2?");
  EXPECT_EQ(r.instructions, "Be terse.");
  EXPECT_EQ(r.generate.max_tokens(), 9);
  EXPECT_EQ(r.max_output_tokens, 9);
  EXPECT_FLOAT_EQ(r.generate.sampling().temperature(), 0.5f);
  const OpenAiRequest plain = Parse(kResponses, R"({"input": "Hello"})");
  ASSERT_EQ(plain.messages.size(), 1u);
  EXPECT_EQ(plain.messages[0]["role"], "user");
  EXPECT_EQ(plain.generate.max_tokens(), 0);  // what the context has left, as chat
  EXPECT_FALSE(plain.instructions.has_value());
}

TEST(OpenAiRequest, ResponsesRefusesStateToolsAndNonTextByName) {
  EXPECT_EQ(RefusedParam(kResponses, "{}"), "input");
  EXPECT_EQ(RefusedParam(kResponses, R"({"input": []})"), "input");
  EXPECT_EQ(RefusedParam(kResponses, R"({"input": "x", "previous_response_id": "resp_1"})"), "previous_response_id");
  EXPECT_EQ(RefusedParam(kResponses, R"({"input": "x", "tools": [{"type": "web_search"}]})"), "tools");
  EXPECT_EQ(RefusedParam(kResponses, R"({"input": "x", "tool_choice": "required"})"), "tool_choice");
  EXPECT_EQ(RefusedParam(kResponses, R"({"input": "x", "background": true})"), "background");
  EXPECT_EQ(RefusedParam(kResponses, R"({"input": "x", "text": {"format": {"type": "json_schema"}}})"), "text");
  EXPECT_EQ(RefusedParam(kResponses, R"({"input": "x", "instructions": 5})"), "instructions");
  EXPECT_EQ(RefusedParam(kResponses, R"({"input": "x", "max_output_tokens": 0})"), "max_output_tokens");
  EXPECT_EQ(RefusedParam(kResponses, R"({"input": [{"type": "function_call_output", "output": "x"}]})"),
            "input[0].type");
  EXPECT_EQ(RefusedParam(kResponses, R"({"input": [{"role": "user", "content": [{"type": "input_image"}]}]})"),
            "input[0].content[0].type");
  EXPECT_EQ(RefusedParam(kResponses, R"({"input": [{"role": "tool", "content": "x"}]})"), "input[0].role");
}

TEST(OpenAiRequest, TheErrorObjectCarriesStatusTypeAndParam) {
  EXPECT_EQ(HttpStatusOf(StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusOf(StatusCode::kUnauthenticated), 401);
  EXPECT_EQ(HttpStatusOf(StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusOf(StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatusOf(StatusCode::kUnavailable), 503);
  const auto body = nlohmann::json::parse(OpenAiErrorBody(InvalidArgument("sampling.top_p: must be in (0, 1]")));
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(body["error"]["param"], "top_p");
  EXPECT_EQ(body["error"]["message"], "sampling.top_p: must be in (0, 1]");
  EXPECT_TRUE(body["error"]["code"].is_null());
  // Invalid UTF-8 in a message (a token's bytes) is mended, never an exception.
  EXPECT_TRUE(nlohmann::json::accept(OpenAiErrorBody(InvalidArgument(std::string("x: \xff\xfe")))));
}

}  // namespace
}  // namespace tpserve
