// The OpenAI-compatible HTTP API of the real server on loopback, driven by cpp-httplib's client
// and raw sockets: greedy output equal to gRPC's, the SSE framing byte for byte and each chunk
// against the shape of OpenAI's chunk object, chat through the model's template (message text
// never becomes special tokens), errors as OpenAI error objects with their HTTP status, a closed
// stream freeing its KV blocks, slow and idle clients cut off, the API key, 429 and draining.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <future>
#include <set>
#include <thread>

#include "tests/engine/engine_test_util.h"
#include "tests/server/raw_http.h"
#include "tests/server/server_process.h"
#include "tpserve/v1/tpserve.grpc.pb.h"

namespace tpserve {
namespace {

using nlohmann::json;
using testing::Connect;
using testing::ServerCloses;
using testing::ServerProcess;
using testing::Threads;

constexpr char kModelName[] = "tiny-test";

std::vector<std::string> ServeArgs(std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"serve",  "--model", testing::TinyModelPath(), "--port", "0", "--metrics-port",
                                   "0",      "--threads", "2", "--tp", "1", "--http-port", "0",
                                   "--served-model-name", kModelName};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

std::string GrpcGreedyText(const std::string& target, const std::string& prompt, int max_tokens) {
  auto stub = v1::TpServe::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::GenerateRequest request;
  request.set_text(prompt);
  request.set_max_tokens(max_tokens);
  request.set_ignore_eos(true);
  auto reader = stub->Generate(&context, request);
  std::string text;
  v1::GenerateResponse response;
  while (reader->Read(&response)) text += response.text();
  EXPECT_TRUE(reader->Finish().ok());
  return text;
}

v1::StatsResponse Stats(const std::string& target) {
  auto stub = v1::TpServe::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  v1::StatsResponse stats;
  EXPECT_TRUE(stub->Stats(&context, v1::StatsRequest(), &stats).ok());
  return stats;
}

struct HttpResult {
  int status = 0;
  std::string body;
  std::string content_encoding;
};

HttpResult Post(int port, const std::string& path, const std::string& body, httplib::Headers headers = {}) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(60, 0);
  auto result = client.Post(path.c_str(), headers, body, "application/json");
  if (!result) return {-1, httplib::to_string(result.error()), ""};
  return {result->status, result->body, result->get_header_value("Content-Encoding")};
}

HttpResult Get(int port, const std::string& path, httplib::Headers headers = {}) {
  httplib::Client client("127.0.0.1", port);
  auto result = client.Get(path.c_str(), headers);
  if (!result) return {-1, httplib::to_string(result.error()), ""};
  return {result->status, result->body, result->get_header_value("Content-Encoding")};
}

// The events of an SSE body, checked byte for byte: each is "data: PAYLOAD\n\n", the last payload is
// [DONE] and nothing follows it.
std::vector<std::string> SsePayloads(const std::string& body) {
  std::vector<std::string> payloads;
  size_t at = 0;
  while (at < body.size()) {
    EXPECT_EQ(body.compare(at, 6, "data: "), 0) << "event at byte " << at << " does not start with 'data: '";
    const size_t end = body.find("\n\n", at);
    if (end == std::string::npos) {
      ADD_FAILURE() << "event at byte " << at << " is not terminated by a blank line";
      break;
    }
    const std::string payload = body.substr(at + 6, end - at - 6);
    EXPECT_EQ(payload.find('\n'), std::string::npos) << "an event spans lines: " << payload;
    payloads.push_back(payload);
    at = end + 2;
  }
  EXPECT_FALSE(payloads.empty());
  if (!payloads.empty()) {
    EXPECT_EQ(payloads.back(), "[DONE]");
  }
  return payloads;
}

// OpenAI's chunk object (id and created by type only).
void ExpectChunkShape(const json& chunk, bool chat) {
  ASSERT_TRUE(chunk.is_object()) << chunk;
  EXPECT_TRUE(chunk["id"].is_string()) << chunk;
  EXPECT_TRUE(chunk["created"].is_number_integer()) << chunk;
  EXPECT_EQ(chunk["object"], chat ? "chat.completion.chunk" : "text_completion") << chunk;
  EXPECT_EQ(chunk["model"], kModelName) << chunk;
  ASSERT_TRUE(chunk["choices"].is_array()) << chunk;
  for (const json& choice : chunk["choices"]) {
    EXPECT_EQ(choice["index"], 0);
    if (chat) {
      ASSERT_TRUE(choice["delta"].is_object()) << chunk;
      for (const auto& [key, value] : choice["delta"].items()) {
        EXPECT_TRUE(key == "role" || key == "content") << key;
        EXPECT_TRUE(value.is_string()) << chunk;
      }
    } else {
      EXPECT_TRUE(choice["text"].is_string()) << chunk;
    }
    EXPECT_TRUE(choice.contains("logprobs")) << chunk;
    const json& reason = choice["finish_reason"];
    EXPECT_TRUE(reason.is_null() || reason == "stop" || reason == "length") << chunk;
  }
}

// The streamed text, with each chunk's shape checked; `usage` is set from a usage chunk.
std::string StreamedText(const std::string& body, bool chat, json* usage = nullptr, int* finish_chunks = nullptr) {
  std::string text;
  const std::vector<std::string> payloads = SsePayloads(body);
  for (size_t i = 0; i + 1 < payloads.size(); ++i) {
    const json chunk = json::parse(payloads[i]);
    ExpectChunkShape(chunk, chat);
    if (chunk.contains("usage") && !chunk["usage"].is_null() && usage != nullptr) {
      *usage = chunk["usage"];
    }
    for (const json& choice : chunk["choices"]) {
      text += chat ? choice["delta"].value("content", "") : choice["text"].get<std::string>();
      if (!choice["finish_reason"].is_null() && finish_chunks) ++*finish_chunks;
    }
  }
  return text;
}

class HttpApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess();
    ASSERT_TRUE(server_->Start(ServeArgs())) << server_->log();
    ASSERT_GT(server_->http_port(), 0) << server_->log();
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(server_->Stop(), 0);
    delete server_;
  }
  static int port() { return server_->http_port(); }
  static ServerProcess* server_;
};
ServerProcess* HttpApiTest::server_ = nullptr;

TEST_F(HttpApiTest, CompletionsEqualGrpcAndStreamFramingIsExact) {
  const std::string expected = GrpcGreedyText(server_->grpc_target(), "The quick brown fox", 12);
  const json request = {{"model", kModelName}, {"prompt", "The quick brown fox"}, {"max_tokens", 12},
                        {"temperature", 0}, {"ignore_eos", true}};
  const HttpResult whole = Post(port(), "/v1/completions", request.dump());
  ASSERT_EQ(whole.status, 200) << whole.body;
  const json response = json::parse(whole.body);
  EXPECT_EQ(response["object"], "text_completion");
  EXPECT_EQ(response["choices"][0]["text"], expected);
  EXPECT_EQ(response["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(response["usage"]["completion_tokens"], 12);
  EXPECT_EQ(response["usage"]["total_tokens"],
            response["usage"]["prompt_tokens"].get<int>() + response["usage"]["completion_tokens"].get<int>());

  json streamed = request;
  streamed["stream"] = true;
  streamed["stream_options"] = {{"include_usage", true}};
  // Clients that accept compression (every SDK does) still get each event as it is made: an
  // event stream is never compressed.
  const HttpResult sse = Post(port(), "/v1/completions", streamed.dump(), {{"Accept-Encoding", "gzip, deflate, br"}});
  ASSERT_EQ(sse.status, 200) << sse.body;
  EXPECT_EQ(sse.content_encoding, "");
  json usage;
  int finish_chunks = 0;
  EXPECT_EQ(StreamedText(sse.body, /*chat=*/false, &usage, &finish_chunks), expected);
  EXPECT_EQ(finish_chunks, 1);
  EXPECT_EQ(usage, response["usage"]);
}

TEST_F(HttpApiTest, CompletionLogprobsAreTheChosenTokensAndTheirAlternatives) {
  const json request = {{"prompt", "Hello"}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true},
                        {"logprobs", 3}};
  const HttpResult result = Post(port(), "/v1/completions", request.dump());
  ASSERT_EQ(result.status, 200) << result.body;
  const json choice = json::parse(result.body)["choices"][0];
  const json& lp = choice["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 6u) << lp;
  std::string joined;
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(lp["text_offset"][i], joined.size());
    joined += lp["tokens"][i].get<std::string>();
    const json& top = lp["top_logprobs"][i];
    ASSERT_EQ(top.size(), 3u) << top;
    double best = -1e30;
    for (const auto& [token, logprob] : top.items()) best = std::max(best, logprob.get<double>());
    // Greedy: the chosen token is the most likely one, and among the alternatives.
    EXPECT_DOUBLE_EQ(lp["token_logprobs"][i].get<double>(), best);
    EXPECT_TRUE(top.contains(lp["tokens"][i].get<std::string>())) << top;
    EXPECT_LE(best, 0.0);
  }
  EXPECT_EQ(joined, choice["text"].get<std::string>());
}

TEST_F(HttpApiTest, ChatRendersTheModelsTemplateAndStreamsChunks) {
  // The tiny model's template is Llama-3's; the gRPC reference is that rendering written out by
  // hand (gRPC adds the BOS itself).
  const std::string rendered =
      "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n";
  const std::string expected = GrpcGreedyText(server_->grpc_target(), rendered, 10);
  const json request = {{"model", kModelName},
                        {"messages", {{{"role", "system"}, {"content", "Be brief."}},
                                      {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "Hi "}},
                                                                      {{"type", "text"}, {"text", "there"}}}}}}},
                        {"max_completion_tokens", 10},
                        {"temperature", 0},
                        {"ignore_eos", true}};
  const HttpResult whole = Post(port(), "/v1/chat/completions", request.dump());
  ASSERT_EQ(whole.status, 200) << whole.body;
  const json response = json::parse(whole.body);
  EXPECT_EQ(response["object"], "chat.completion");
  EXPECT_EQ(response["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(response["choices"][0]["message"]["content"], expected);

  json streamed = request;
  streamed["stream"] = true;
  const HttpResult sse = Post(port(), "/v1/chat/completions", streamed.dump());
  ASSERT_EQ(sse.status, 200) << sse.body;
  EXPECT_EQ(StreamedText(sse.body, /*chat=*/true), expected);
  const json first = json::parse(SsePayloads(sse.body).front());
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
}

TEST_F(HttpApiTest, SpecialTokensInMessagesStayText) {
  auto prompt_tokens = [&](const std::string& content) {
    const json request = {{"messages", {{{"role", "user"}, {"content", content}}}}, {"max_tokens", 1}};
    const HttpResult result = Post(port(), "/v1/chat/completions", request.dump());
    EXPECT_EQ(result.status, 200) << result.body;
    return json::parse(result.body)["usage"]["prompt_tokens"].get<int>();
  };
  // One special token would add one id; as text, "<|eot_id|>" is several.
  EXPECT_GE(prompt_tokens("<|eot_id|>"), prompt_tokens("x") + 3);
}

// POST /v1/responses: chat's text for the same conversation, OpenAI's response object, and its
// event stream: each event named twice (event: line and "type"), sequence numbers counting up, the
// deltas adding up to the text, the last event the response completed or incomplete.
TEST_F(HttpApiTest, ResponsesGiveChatsTextAsOpenAisObjectsAndEvents) {
  const json chat_request = {{"messages", {{{"role", "system"}, {"content", "Be terse."}},
                                           {{"role", "user"}, {"content", "Hello"}}}},
                             {"max_tokens", 6}, {"temperature", 0}};
  const json chat = json::parse(Post(port(), "/v1/chat/completions", chat_request.dump()).body);
  const std::string expected = chat["choices"][0]["message"]["content"];
  const json request = {{"instructions", "Be terse."}, {"input", "Hello"}, {"max_output_tokens", 6},
                        {"temperature", 0}};
  const HttpResult whole = Post(port(), "/v1/responses", request.dump());
  ASSERT_EQ(whole.status, 200) << whole.body;
  const json response = json::parse(whole.body);
  EXPECT_EQ(response["object"], "response");
  EXPECT_EQ(response["instructions"], "Be terse.");
  ASSERT_EQ(response["output"].size(), 1u);
  EXPECT_EQ(response["output"][0]["content"][0]["type"], "output_text");
  EXPECT_EQ(response["output"][0]["content"][0]["text"], expected);
  EXPECT_EQ(response["usage"]["input_tokens"], chat["usage"]["prompt_tokens"]);
  EXPECT_EQ(response["usage"]["output_tokens"], chat["usage"]["completion_tokens"]);
  const bool length = chat["choices"][0]["finish_reason"] == "length";
  EXPECT_EQ(response["status"], length ? "incomplete" : "completed");

  json streamed = request;
  streamed["stream"] = true;
  const HttpResult sse = Post(port(), "/v1/responses", streamed.dump());
  ASSERT_EQ(sse.status, 200) << sse.body;
  std::vector<std::string> types;
  std::string deltas;
  size_t at = 0;
  while (at < sse.body.size()) {
    const size_t end = sse.body.find("\n\n", at);
    ASSERT_NE(end, std::string::npos) << "an unterminated event at byte " << at;
    const std::string event = sse.body.substr(at, end - at);
    at = end + 2;
    ASSERT_EQ(event.rfind("event: ", 0), 0u) << event;
    const size_t newline = event.find('\n');
    ASSERT_NE(newline, std::string::npos);
    const std::string type = event.substr(7, newline - 7);
    ASSERT_EQ(event.compare(newline + 1, 6, "data: "), 0) << event;
    const json data = json::parse(event.substr(newline + 7));
    EXPECT_EQ(data["type"], type);
    EXPECT_EQ(data["sequence_number"], types.size());
    if (type == "response.output_text.delta") deltas += data["delta"].get<std::string>();
    types.push_back(type);
  }
  ASSERT_GE(types.size(), 8u);
  EXPECT_EQ(types[0], "response.created");
  EXPECT_EQ(types[3], "response.content_part.added");
  EXPECT_EQ(types.back(), length ? "response.incomplete" : "response.completed");
  EXPECT_EQ(deltas, expected);
}

// Without --allowed-origins there is no CORS: no preflight answer, no Access-Control header.
TEST_F(HttpApiTest, CorsIsOffByDefault) {
  httplib::Client client("127.0.0.1", port());
  auto preflight = client.Options("/v1/completions", {{"Origin", "https://app.example"}});
  ASSERT_TRUE(preflight);
  EXPECT_EQ(preflight->status, 404);
  auto models = client.Get("/v1/models", {{"Origin", "https://app.example"}});
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 200);
  EXPECT_FALSE(models->has_header("Access-Control-Allow-Origin"));
}

TEST_F(HttpApiTest, ModelsListTheServedName) {
  const HttpResult list = Get(port(), "/v1/models");
  ASSERT_EQ(list.status, 200);
  const json models = json::parse(list.body);
  EXPECT_EQ(models["object"], "list");
  ASSERT_EQ(models["data"].size(), 1u);
  EXPECT_EQ(models["data"][0]["id"], kModelName);
  EXPECT_EQ(Get(port(), std::string("/v1/models/") + kModelName).status, 200);
  EXPECT_EQ(Get(port(), "/v1/models/gpt-4").status, 404);
  EXPECT_EQ(Get(port(), "/health").status, 200);
}

// A list of prompts: one choice per prompt, in order, each the text the prompt alone gets; usage
// sums them; streamed, each chunk names its choice and each choice ends once.
TEST_F(HttpApiTest, AListOfPromptsGivesOneChoiceEach) {
  const std::vector<std::string> prompts = {"The quick brown fox", "Hello", "Once upon a time"};
  json request = {{"prompt", prompts}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}};
  const HttpResult whole = Post(port(), "/v1/completions", request.dump());
  ASSERT_EQ(whole.status, 200) << whole.body;
  const json response = json::parse(whole.body);
  ASSERT_EQ(response["choices"].size(), prompts.size());
  int prompt_tokens = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(response["choices"][i]["index"], i);
    EXPECT_EQ(response["choices"][i]["text"], GrpcGreedyText(server_->grpc_target(), prompts[i], 6)) << i;
    const json alone = json::parse(Post(port(), "/v1/completions",
                                        json{{"prompt", prompts[i]}, {"max_tokens", 1}}.dump()).body);
    prompt_tokens += alone["usage"]["prompt_tokens"].get<int>();
  }
  EXPECT_EQ(response["usage"]["completion_tokens"], 6 * static_cast<int>(prompts.size()));
  EXPECT_EQ(response["usage"]["prompt_tokens"], prompt_tokens);

  request["stream"] = true;
  const HttpResult sse = Post(port(), "/v1/completions", request.dump());
  ASSERT_EQ(sse.status, 200) << sse.body;
  std::vector<std::string> texts(prompts.size());
  std::vector<int> finishes(prompts.size());
  const std::vector<std::string> payloads = SsePayloads(sse.body);
  for (size_t i = 0; i + 1 < payloads.size(); ++i) {
    const json chunk = json::parse(payloads[i]);
    for (const json& choice : chunk["choices"]) {
      const size_t index = choice["index"].get<size_t>();
      ASSERT_LT(index, prompts.size());
      texts[index] += choice["text"].get<std::string>();
      finishes[index] += choice["finish_reason"].is_null() ? 0 : 1;
    }
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(texts[i], response["choices"][i]["text"].get<std::string>()) << i;
    EXPECT_EQ(finishes[i], 1) << i;
  }
}

// Without a seed each request draws its own (LangChain's .batch() of identical requests must not get
// identical samples); with one, the output is reproducible, seed 0 included.
TEST_F(HttpApiTest, UnseededRequestsDrawTheirOwnSeedAndSeededOnesRepeat) {
  auto sample = [&](const json& extra) {
    json request = {{"prompt", "Hello"}, {"max_tokens", 8}, {"temperature", 1.0}, {"ignore_eos", true}};
    request.update(extra);
    const HttpResult result = Post(port(), "/v1/completions", request.dump());
    EXPECT_EQ(result.status, 200) << result.body;
    return json::parse(result.body)["choices"][0]["text"].get<std::string>();
  };
  std::set<std::string> unseeded;
  for (int i = 0; i < 5; ++i) unseeded.insert(sample(json::object()));
  EXPECT_GE(unseeded.size(), 4u);  // 8 tokens at temperature 1 over a 128k vocabulary
  EXPECT_EQ(sample({{"seed", 0}}), sample({{"seed", 0}}));
  EXPECT_EQ(sample({{"seed", -3}}), sample({{"seed", -3}}));
  EXPECT_NE(sample({{"seed", 1}}), sample({{"seed", 2}}));
}

TEST_F(HttpApiTest, BadRequestsFailAloneWithOpenAiErrors) {
  struct Case {
    std::string path, body;
    int status;
    std::string param;  // "" when the error has none
  };
  const std::vector<Case> cases = {
      {"/v1/completions", "{not json", 400, "body"},
      {"/v1/completions", "[1, 2]", 400, "body"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": "5"})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 2.5})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 1e300})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 100000})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": "x", "temperature": "hot"})", 400, "temperature"},
      {"/v1/completions", R"({"prompt": "x", "temperature": -1})", 400, "temperature"},
      {"/v1/completions", R"({"prompt": "x", "n": 2})", 400, "n"},
      {"/v1/completions", R"({"prompt": ["a", [1]]})", 400, "prompt[1]"},
      {"/v1/completions", R"({"prompt": "x", "top_p": 0})", 400, "top_p"},
      {"/v1/completions", R"({"prompt": "x", "stream_options": {"include_usage": true}})", 400, "stream_options"},
      {"/v1/completions", R"({"prompt": ["x", "y"], "max_tokens": 100000})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": [1, -5]})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": [999999999]})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": "x", "stop": [1]})", 400, "stop"},
      {"/v1/completions", R"({"prompt": "x", "stream": "yes"})", 400, "stream"},
      {"/v1/completions", R"({"max_tokens": 3})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": "x", "model": "gpt-4"})", 404, ""},
      {"/v1/chat/completions", R"({"messages": []})", 400, "messages"},
      {"/v1/chat/completions", R"({"messages": [{"content": "x"}]})", 400, "messages[0].role"},
      {"/v1/chat/completions", R"({"messages": [{"role": "bogus", "content": "x"}]})", 400, "messages[0].role"},
      {"/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 21})", 400,
       "top_logprobs"},
      {"/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})", 400,
       "messages[0].content[0].type"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "tools": [{}]})", 400, "tools"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", 400,
       "top_logprobs"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "presence_penalty": 0.5})", 400,
       "presence_penalty"},
      {"/v1/nothing", "{}", 404, ""},
  };
  auto invalid_argument_count = [&] {
    const HttpResult metrics = Get(server_->metrics_port(), "/metrics");
    const std::string key = "tpserve_request_errors_total{code=\"INVALID_ARGUMENT\"} ";
    const size_t at = metrics.body.find(key);
    return at == std::string::npos ? 0 : std::stoi(metrics.body.substr(at + key.size()));
  };
  const int refused_before = invalid_argument_count();
  int refusals = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path + " " + c.body);
    refusals += c.status == 400 ? 1 : 0;
    const HttpResult result = Post(port(), c.path, c.body);
    EXPECT_EQ(result.status, c.status) << result.body;
    const json error = json::parse(result.body, nullptr, false);
    ASSERT_TRUE(error.is_object() && error["error"].is_object()) << result.body;
    EXPECT_TRUE(error["error"]["message"].is_string());
    EXPECT_EQ(error["error"]["type"], c.status == 400 || c.status == 404 ? "invalid_request_error" : "");
    EXPECT_EQ(error["error"]["param"], c.param.empty() ? json(nullptr) : json(c.param));
  }
  // Counted with gRPC's refusals, by status name.
  EXPECT_EQ(invalid_argument_count() - refused_before, refusals);
  // A body over --max-request-bytes (1 MiB by default) is refused before it is parsed.
  const HttpResult huge = Post(port(), "/v1/completions", R"({"prompt": ")" + std::string(2 << 20, 'a') + "\"}");
  EXPECT_EQ(huge.status, 413);
  EXPECT_NE(huge.body.find("max-request-bytes"), std::string::npos) << huge.body;
  // ... and the server serves the next request as ever.
  const HttpResult ok = Post(port(), "/v1/completions", R"({"prompt": "Hi", "max_tokens": 2})");
  EXPECT_EQ(ok.status, 200) << ok.body;
}

TEST_F(HttpApiTest, ClosingTheStreamCancelsTheRequestAndFreesItsBlocks) {
  const v1::StatsResponse before = Stats(server_->grpc_target());
  httplib::Client client("127.0.0.1", port());
  const json request = {{"prompt", "Hello"}, {"max_tokens", 1500}, {"ignore_eos", true}, {"stream", true}};
  int chunks = 0;
  httplib::Request post;
  post.method = "POST";
  post.path = "/v1/completions";
  post.body = request.dump();
  post.set_header("Content-Type", "application/json");
  post.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 4; };  // then hang up
  auto result = client.send(post);
  EXPECT_FALSE(result);  // the client cancelled
  EXPECT_GE(chunks, 4);
  client.stop();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  v1::StatsResponse after;
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    after = Stats(server_->grpc_target());
  } while ((after.requests_running() != 0 || after.kv_blocks_free() != before.kv_blocks_free()) &&
           std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(after.requests_running(), 0);
  EXPECT_EQ(after.kv_blocks_free(), before.kv_blocks_free());
  EXPECT_LT(after.steps() - before.steps(), 1400) << "the cancelled request ran to its end";
}

TEST(HttpApiClients, SlowAndIdleClientsAreCutOffWhileHealthAnswers) {
  ServerProcess server;
  ASSERT_TRUE(server.Start(ServeArgs({"--http-timeout-s", "1"}))) << server.log();
  const int port = server.http_port();
  EXPECT_EQ(Post(port, "/v1/completions", R"({"prompt": "Hi", "max_tokens": 2})").status, 200);
  const int threads_before = Threads(server.pid());
  // Slow loris: headers that never end; a body that never arrives.
  const int headers = Connect(port);
  const std::string partial = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  ASSERT_EQ(send(headers, partial.data(), partial.size(), 0), static_cast<ssize_t>(partial.size()));
  const int body = Connect(port);
  const std::string short_body =
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{\"prompt\":";
  ASSERT_EQ(send(body, short_body.data(), short_body.size(), 0), static_cast<ssize_t>(short_body.size()));
  // Many idle connections, fewer than the threads.
  std::vector<int> idle;
  for (int i = 0; i < 40; ++i) idle.push_back(Connect(port));
  const HttpResult health = Get(port, "/health");
  EXPECT_EQ(health.status, 200) << health.body;
  EXPECT_TRUE(ServerCloses(headers));
  EXPECT_TRUE(ServerCloses(body));
  for (int fd : idle) EXPECT_TRUE(ServerCloses(fd));
  for (int fd : idle) close(fd);
  close(headers);
  close(body);
  EXPECT_EQ(Post(port, "/v1/completions", R"({"prompt": "Hi", "max_tokens": 2})").status, 200);
  // Each of the 42 cut-off connections had a thread; none may remain (gRPC's own pool may move a few).
  EXPECT_LT(Threads(server.pid()), threads_before + 8) << "threads leaked by the cut-off connections";
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

// This server also allows two browser origins (CORS): the preflight needs no key, an allowed Origin
// is echoed on every answer, refusals included (so the page can read the error), others get none.
TEST(HttpApiClients, TheApiKeyIsRequiredAndHealthStaysOpen) {
  testing::TempDir dir;
  const std::string key_file = (dir.path() / "key").string();
  std::ofstream(key_file) << "http-test-key-0123456789\n";
  ServerProcess server;
  ASSERT_TRUE(server.Start(ServeArgs({"--api-key-file", key_file, "--allowed-origins",
                                      "https://app.example,https://b.example"})))
      << server.log();
  {
    httplib::Client client("127.0.0.1", server.http_port());
    auto preflight = client.Options("/v1/chat/completions", {{"Origin", "https://b.example"},
                                                             {"Access-Control-Request-Method", "POST"},
                                                             {"Access-Control-Request-Headers", "authorization"}});
    ASSERT_TRUE(preflight);
    EXPECT_EQ(preflight->status, 204);
    EXPECT_EQ(preflight->get_header_value("Access-Control-Allow-Origin"), "https://b.example");
    EXPECT_NE(preflight->get_header_value("Access-Control-Allow-Headers").find("Authorization"), std::string::npos);
    EXPECT_NE(preflight->get_header_value("Access-Control-Allow-Methods").find("POST"), std::string::npos);
    auto stranger = client.Options("/v1/completions", {{"Origin", "https://evil.example"}});
    ASSERT_TRUE(stranger);
    EXPECT_EQ(stranger->status, 403);
    EXPECT_FALSE(stranger->has_header("Access-Control-Allow-Origin"));
    auto refused = client.Post("/v1/completions", {{"Origin", "https://app.example"}}, R"({"prompt": "Hi"})",
                               "application/json");
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->status, 401);
    EXPECT_EQ(refused->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
    EXPECT_EQ(refused->get_header_value("Vary"), "Origin");
    auto served = client.Post("/v1/completions",
                              {{"Origin", "https://app.example"}, {"Authorization", "Bearer http-test-key-0123456789"}},
                              R"({"prompt": "Hi", "max_tokens": 2})", "application/json");
    ASSERT_TRUE(served);
    EXPECT_EQ(served->status, 200);
    EXPECT_EQ(served->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
    auto other = client.Get("/health", {{"Origin", "https://evil.example"}});
    ASSERT_TRUE(other);
    EXPECT_EQ(other->status, 200);
    EXPECT_FALSE(other->has_header("Access-Control-Allow-Origin"));
  }
  const std::string body = R"({"prompt": "Hi", "max_tokens": 2})";
  for (const httplib::Headers& wrong : {httplib::Headers{}, httplib::Headers{{"Authorization", "Bearer nope"}},
                                        httplib::Headers{{"Authorization", "http-test-key-0123456789"}}}) {
    const HttpResult refused = Post(server.http_port(), "/v1/completions", body, wrong);
    EXPECT_EQ(refused.status, 401) << refused.body;
    EXPECT_EQ(json::parse(refused.body)["error"]["type"], "authentication_error");
    EXPECT_EQ(Get(server.http_port(), "/v1/models", wrong).status, 401);
  }
  const httplib::Headers right = {{"Authorization", "Bearer http-test-key-0123456789"}};
  EXPECT_EQ(Post(server.http_port(), "/v1/completions", body, right).status, 200);
  EXPECT_EQ(Get(server.http_port(), "/v1/models", right).status, 200);
  EXPECT_EQ(Get(server.http_port(), "/health").status, 200);
  EXPECT_EQ(server.Stop(), 0);
}

TEST(HttpApiClients, AFullQueueIs429AndDrainingIs503WhileRunningStreamsFinish) {
  ServerProcess server;
  // The drain bound is far above what the two streams need even under ASan on a loaded 2-core
  // machine (600 tokens each, one after the other, once took over 60 s there and the second stream
  // was cut at the bound); the test ends when they do.
  ASSERT_TRUE(server.Start(ServeArgs({"--max-batch-size", "1", "--max-queue", "1", "--drain-seconds", "600"})))
      << server.log();
  const int port = server.http_port();
  // Each long request runs for half a second or more on the tiny model (~1-3 ms per token).
  const std::string long_request = R"({"prompt": "Hello", "max_tokens": 300, "ignore_eos": true, "stream": true})";
  // The first runs, the second waits in the queue, the third finds it full. Each is sent once the
  // server's Stats show the one before in place (a loaded machine, ASan, may take a while to).
  auto stats_reach = [&](int running, int waiting) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    v1::StatsResponse stats;
    do {
      stats = Stats(server.grpc_target());
      if (stats.requests_running() == running && stats.requests_waiting() == waiting) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    } while (std::chrono::steady_clock::now() < deadline);
    ADD_FAILURE() << "Stats never showed " << running << " running and " << waiting << " waiting; last: "
                  << stats.requests_running() << " and " << stats.requests_waiting();
    return false;
  };
  auto first = std::async(std::launch::async, [&] { return Post(port, "/v1/completions", long_request); });
  ASSERT_TRUE(stats_reach(1, 0));
  auto second = std::async(std::launch::async, [&] { return Post(port, "/v1/completions", long_request); });
  ASSERT_TRUE(stats_reach(1, 1));
  const HttpResult third = Post(port, "/v1/completions", long_request);
  EXPECT_EQ(third.status, 429) << third.body;
  EXPECT_EQ(json::parse(third.body)["error"]["type"], "rate_limit_error");
  // SIGTERM: new requests and health get 503; the running and queued streams end normally.
  server.SendSigterm();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(Post(port, "/v1/completions", R"({"prompt": "Hi", "max_tokens": 2})").status, 503);
  EXPECT_EQ(Get(port, "/health").status, 503);
  for (auto* stream : {&first, &second}) {
    const HttpResult done = stream->get();
    EXPECT_EQ(done.status, 200);
    EXPECT_EQ(SsePayloads(done.body).back(), "[DONE]");
    EXPECT_NE(done.body.find("\"finish_reason\":\"length\""), std::string::npos);
  }
  EXPECT_EQ(server.Wait(), 0) << server.log();
}

// Issue 30: SIGTERM's bound holds whatever the clients do. After --drain-seconds whatever still runs
// is cancelled and every connection closed, and the process is gone within the drain plus serve's
// fixed margin, with clients that stall mid-body, never read their stream, or sent a chat of many
// thousands of messages still being parsed and tokenized on an HTTP event-loop thread.
TEST(HttpApiClients, SigtermExitsWithinTheDrainBoundWhateverTheClientsDo) {
  constexpr int kDrainSeconds = 2;
  constexpr double kMarginSeconds = 2;  // serve's: docs/API.md, "Shutdown"
  constexpr double kSlackSeconds = 1.5;  // the signal's delivery and waitpid's polling on a loaded machine
  constexpr size_t kBodyLimit = 8 << 20;
  ServerProcess server;
  // One sequence at a time: the streams below queue behind each other and outlast the drain.
  ASSERT_TRUE(server.Start(ServeArgs({"--drain-seconds", std::to_string(kDrainSeconds), "--max-batch-size", "1",
                                      "--max-request-bytes", std::to_string(kBodyLimit)})))
      << server.log();
  const int port = server.http_port();
  auto post = [](const std::string& path, const std::string& body) {
    return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  };
  const std::string long_stream =
      post("/v1/completions", R"({"prompt": "Hello", "max_tokens": 1900, "ignore_eos": true, "stream": true})");
  // A long generation over gRPC, read as it comes.
  auto stub = v1::TpServe::NewStub(grpc::CreateChannel(server.grpc_target(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext generation_context;
  v1::GenerateRequest generation;
  generation.set_text("a long generation");
  generation.set_max_tokens(1900);
  generation.set_ignore_eos(true);
  auto generation_reader = stub->Generate(&generation_context, generation);
  v1::GenerateResponse first;
  ASSERT_TRUE(generation_reader->Read(&first));
  auto generation_done = std::async(std::launch::async, [&] {
    v1::GenerateResponse response;
    while (generation_reader->Read(&response)) {
    }
    return generation_reader->Finish();
  });
  // A stream whose reader never reads (a small receive buffer, soon full).
  const int unread = socket(AF_INET, SOCK_STREAM, 0);
  const int small_buffer = 4096;
  setsockopt(unread, SOL_SOCKET, SO_RCVBUF, &small_buffer, sizeof(small_buffer));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(unread, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_TRUE(testing::SendAll(unread, long_stream));
  // A head and part of a body, then nothing.
  const int stalled = Connect(port);
  ASSERT_TRUE(testing::SendAll(stalled, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n"
                                        "{\"prompt\": \"Hel"));
  // A chat of ~7 MiB of short messages: parsed, rendered and tokenized on an event-loop thread.
  json messages = json::array();
  while (messages.size() * 36 < kBodyLimit - (1 << 20)) messages.push_back({{"role", "user"}, {"content", "hi"}});
  const int chat = Connect(port, 60);
  ASSERT_TRUE(testing::SendAll(chat, post("/v1/chat/completions", json{{"messages", messages}}.dump())));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));

  const auto signalled = std::chrono::steady_clock::now();
  server.SendSigterm();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // New requests are refused at once, on both front ends.
  grpc::ClientContext late_context;
  late_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(kDrainSeconds));
  v1::GenerateRequest late;
  late.set_text("too late");
  late.set_max_tokens(2);
  auto late_reader = stub->Generate(&late_context, late);
  v1::GenerateResponse ignored;
  while (late_reader->Read(&ignored)) {
  }
  EXPECT_EQ(late_reader->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(testing::Exchange(port, post("/v1/completions", R"({"prompt": "Hi", "max_tokens": 2})")).status, 503);
  const int exit_status = server.Wait(60);
  const double exit_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count();
  EXPECT_EQ(exit_status, 0) << server.log();
  EXPECT_LT(exit_s, kDrainSeconds + kMarginSeconds + kSlackSeconds) << server.log();
  std::cout << "exited " << exit_s << " s after SIGTERM (--drain-seconds " << kDrainSeconds << ")\n";
  // Every client sees its connection end.
  EXPECT_EQ(generation_done.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  for (int fd : {unread, stalled, chat}) {
    EXPECT_TRUE(ServerCloses(fd));
    close(fd);
  }
}

}  // namespace
}  // namespace tpserve
