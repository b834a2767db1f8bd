#include "clients/openai_wire.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace tpserve {
namespace {

using nlohmann::json;

TEST(OpenAiWire, CompletionsBodyFixesTheLengthAndAsksForUsage) {
  LoadRequest request{.id = "r", .prompt_ids = {5, 6, 7}, .output_tokens = 16};
  const json body = json::parse(OpenAiRequestBody(OpenAiRoute::kCompletions, "tiny", request));
  EXPECT_EQ(body["model"], "tiny");
  EXPECT_EQ(body["prompt"], json::array({5, 6, 7}));
  EXPECT_EQ(body["max_tokens"], 16);
  EXPECT_EQ(body["min_tokens"], 16);
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_EQ(body["temperature"], 0);
  EXPECT_FALSE(body.contains("messages"));

  request.prompt_ids.clear();
  request.prompt_text = "Hello";
  EXPECT_EQ(json::parse(OpenAiRequestBody(OpenAiRoute::kCompletions, "m", request))["prompt"], "Hello");
}

TEST(OpenAiWire, SampledBodyCarriesTheSamplingAndTheRequestsSeedAsSigned) {
  LoadRequest request{.id = "r", .prompt_ids = {5}, .output_tokens = 2};
  json body = json::parse(OpenAiRequestBody(OpenAiRoute::kCompletions, "m", request));
  EXPECT_FALSE(body.contains("top_p"));  // greedy: temperature 0 alone
  EXPECT_FALSE(body.contains("seed"));
  request.sampling = {.temperature = 0.8f, .top_p = 0.9f, .top_k = 0};
  request.seed =
      0xfffffffffffffffeull;  // above int64's range: OpenAI's seed is signed, the same bits
  body = json::parse(OpenAiRequestBody(OpenAiRoute::kChatCompletions, "m", request));
  EXPECT_FLOAT_EQ(body["temperature"].get<float>(), 0.8f);
  EXPECT_FLOAT_EQ(body["top_p"].get<float>(), 0.9f);
  EXPECT_FALSE(body.contains("top_k"));  // 0: no limit, left to the server's default
  EXPECT_EQ(body["seed"].get<int64_t>(), -2);
  request.sampling.top_k = 40;
  EXPECT_EQ(json::parse(OpenAiRequestBody(OpenAiRoute::kCompletions, "m", request))["top_k"], 40);
}

TEST(OpenAiWire, ChatBodyIsOneUserMessage) {
  LoadRequest request{.id = "r", .prompt_ids = {0, 1, 48}, .output_tokens = 4};
  const json body = json::parse(OpenAiRequestBody(OpenAiRoute::kChatCompletions, "m", request));
  EXPECT_FALSE(body.contains("prompt"));
  ASSERT_EQ(body["messages"].size(), 1u);
  EXPECT_EQ(body["messages"][0]["role"], "user");
  EXPECT_EQ(body["messages"][0]["content"], "the of the");  // one word per id, wrapping round the list
  EXPECT_EQ(body["min_tokens"], 4);
}

TEST(OpenAiWire, OnlyChunksWithTextAreContent) {
  // vLLM's first chat chunk: the role and empty content.
  auto role = ParseOpenAiChunk(R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})");
  ASSERT_TRUE(role.ok());
  EXPECT_FALSE(role->content);
  auto chat = ParseOpenAiChunk(R"({"choices":[{"delta":{"content":"Hi"},"finish_reason":null}]})");
  EXPECT_TRUE(chat->content);
  auto reasoning = ParseOpenAiChunk(R"({"choices":[{"delta":{"reasoning_content":"hmm"}}]})");
  EXPECT_TRUE(reasoning->content);
  auto text = ParseOpenAiChunk(R"({"choices":[{"text":" x","logprobs":null}]})");
  EXPECT_TRUE(text->content);
  auto finish = ParseOpenAiChunk(R"({"choices":[{"text":"","finish_reason":"length"}]})");
  EXPECT_FALSE(finish->content);
  EXPECT_FALSE(finish->completion_tokens);
}

TEST(OpenAiWire, UsageAndErrorsInTheStream) {
  auto usage = ParseOpenAiChunk(R"({"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":16}})");
  ASSERT_TRUE(usage.ok());
  EXPECT_EQ(usage->completion_tokens, 16);
  EXPECT_FALSE(usage->content);
  EXPECT_FALSE(ParseOpenAiChunk(R"({"usage":{"completion_tokens":-1}})")->completion_tokens);
  EXPECT_FALSE(ParseOpenAiChunk(R"({"usage":{"completion_tokens":1e99}})")->completion_tokens);
  EXPECT_FALSE(ParseOpenAiChunk(R"({"usage":null})")->completion_tokens);

  auto error = ParseOpenAiChunk(R"({"error":{"message":"engine failed","type":"server_error"}})");
  EXPECT_EQ(error->error, "engine failed");
  EXPECT_EQ(ParseOpenAiChunk(R"({"error":"plain"})")->error, "plain");
  EXPECT_EQ(ParseOpenAiChunk("not json").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(ParseOpenAiChunk("[1]").status().code(), StatusCode::kDataLoss);
}

TEST(OpenAiWire, ErrorMessages) {
  EXPECT_EQ(OpenAiErrorMessage(R"({"error":{"message":"model: 'x' is not served here","type":"x","code":404}})"),
            "model: 'x' is not served here");
  EXPECT_EQ(OpenAiErrorMessage(R"({"detail":"Not Found"})"), "Not Found");
  EXPECT_EQ(OpenAiErrorMessage(R"({"message":"bad","object":"error"})"), "bad");
  EXPECT_EQ(OpenAiErrorMessage("<html>502 Bad Gateway\n<body>"), "<html>502 Bad Gateway");
  EXPECT_LE(OpenAiErrorMessage(std::string(10000, 'x')).size(), 310u);
}

TEST(OpenAiWire, ServerUrls) {
  auto plain = ParseOpenAiServerUrl("http://127.0.0.1:8000");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->origin, "http://127.0.0.1:8000");
  EXPECT_EQ(plain->prefix, "");
  EXPECT_FALSE(plain->tls);
  auto sdk = ParseOpenAiServerUrl("https://gpu-box:443/proxy/v1/");
  ASSERT_TRUE(sdk.ok());
  EXPECT_EQ(sdk->origin, "https://gpu-box:443");
  EXPECT_EQ(sdk->prefix, "/proxy");
  EXPECT_TRUE(sdk->tls);
  EXPECT_EQ(ParseOpenAiServerUrl("http://h:1/v1")->prefix, "");
  for (const char* bad : {"127.0.0.1:8000", "ftp://h:1", "http://", "http:///v1", "http://h:1/?x=1"}) {
    EXPECT_EQ(ParseOpenAiServerUrl(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(OpenAiWire, FirstModelId) {
  EXPECT_EQ(*FirstModelId(R"({"object":"list","data":[{"id":"tiny","object":"model"},{"id":"b"}]})"), "tiny");
  EXPECT_FALSE(FirstModelId(R"({"object":"list","data":[]})").ok());
  EXPECT_FALSE(FirstModelId("nonsense").ok());
}

TEST(StreamTimer, TimesFromArrivalsAndTakesTheServersCount) {
  StreamTimer timer;
  timer.Arrived();
  timer.Arrived();
  timer.Arrived();
  RequestRecord counted = timer.Finish("", std::nullopt);
  EXPECT_TRUE(counted.ok);
  EXPECT_EQ(counted.output_tokens, 3);
  EXPECT_EQ(counted.itl_s.size(), 2u);
  EXPECT_LE(counted.ttft_s, counted.e2e_s);

  StreamTimer reported;
  reported.Arrived();
  RequestRecord usage = reported.Finish("", 16);
  EXPECT_EQ(usage.output_tokens, 16);  // usage wins: a chunk may carry several tokens

  StreamTimer silent;  // text held back to the end: first seen at the end
  RequestRecord late = silent.Finish("", 4);
  EXPECT_EQ(late.ttft_s, late.e2e_s);

  StreamTimer refused;
  RequestRecord failed = refused.Finish("HTTP 404: model: 'x' is not served here");
  EXPECT_FALSE(failed.ok);
  EXPECT_EQ(failed.error_code, "HTTP 404: model: 'x' is not served here");
}

}  // namespace
}  // namespace tpserve
