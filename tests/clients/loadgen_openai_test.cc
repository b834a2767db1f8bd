// `tpserve loadgen --api openai` against the real `tpserve serve --http-port` on loopback, run as a
// user runs it: its JSON counts add up, the output lengths are exact, and the same workload over
// gRPC against the same server counts the same tokens; refusals are failed requests named by
// their HTTP status and message; https with a CA and an API key.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>

#include "tests/server/server_process.h"
#include "tests/test_util.h"

namespace tpserve {
namespace {

using nlohmann::json;
using testing::ServerProcess;

struct LoadgenRun {
  int exit_code = -1;
  std::string output;  // stdout (stderr too when asked)
  json parsed;         // stdout as JSON, or discarded
};

LoadgenRun Loadgen(const std::string& args, bool with_stderr = false) {
  const std::string command =
      testing::TpserveBinary() + " loadgen " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  LoadgenRun run;
  FILE* pipe = popen(command.c_str(), "r");
  char buffer[4096];
  while (pipe && fgets(buffer, sizeof(buffer), pipe)) run.output += buffer;
  const int status = pipe ? pclose(pipe) : -1;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.parsed = json::parse(run.output, nullptr, false);
  return run;
}

std::vector<std::string> ServeArgs(std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"serve", "--model", "tiny", "--load-format", "dummy", "--port", "0",
                                   "--metrics-port", "0", "--http-port", "0", "--threads", "2"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// Small, bounded and exact: 8 requests, 4 in flight, 12 output tokens each.
constexpr int kRequests = 8, kOutputTokens = 12;
const std::string kWorkload = " --json --requests 8 --concurrency 4 --prompt-tokens 8-24 --output-tokens 12 --warmup 1 --seed 5";

// Each request's TTFT is at most its E2E, so every order statistic of one is at most the other's.
void ExpectCompleteRun(const json& out, const std::string& what) {
  ASSERT_FALSE(out.is_discarded()) << what;
  const json& run = out["runs"][0];
  EXPECT_EQ(run["sent"], kRequests) << what;
  EXPECT_EQ(run["completed"], kRequests) << what << ": " << run["errors"].dump();
  EXPECT_EQ(run["failed"], 0) << what;
  EXPECT_EQ(run["output_tokens"], kRequests * kOutputTokens) << what;
  EXPECT_EQ(run["ttft_ms"]["count"], kRequests) << what;
  EXPECT_EQ(run["tpot_ms"]["count"], kRequests) << what;
  EXPECT_GT(run["itl_ms"]["count"].get<int>(), 0) << what;
  for (const char* stat : {"mean", "p50", "p90", "p99"}) {
    EXPECT_GT(run["ttft_ms"][stat].get<double>(), 0) << what << " " << stat;
    EXPECT_LE(run["ttft_ms"][stat].get<double>(), run["e2e_ms"][stat].get<double>()) << what << " " << stat;
  }
}

class LoadgenOpenAi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess();
    ASSERT_TRUE(server_->Start(ServeArgs())) << server_->log();
    ASSERT_GT(server_->http_port(), 0) << server_->log();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static std::string Url() { return "http://127.0.0.1:" + std::to_string(server_->http_port()); }

  static inline ServerProcess* server_ = nullptr;
};

TEST_F(LoadgenOpenAi, SameWorkloadSameTokensAsGrpc) {
  const LoadgenRun http = Loadgen("--api openai --server " + Url() + kWorkload);
  ASSERT_EQ(http.exit_code, 0) << http.output;
  ExpectCompleteRun(http.parsed, "openai completions");
  EXPECT_EQ(http.parsed["api"], "openai");
  EXPECT_EQ(http.parsed["endpoint"], "completions");
  EXPECT_EQ(http.parsed["model"], "tiny");  // from GET /v1/models

  const LoadgenRun grpc = Loadgen("--server " + server_->grpc_target() + kWorkload);
  ASSERT_EQ(grpc.exit_code, 0) << grpc.output;
  ExpectCompleteRun(grpc.parsed, "grpc");
  EXPECT_EQ(grpc.parsed["api"], "grpc");
  EXPECT_EQ(http.parsed["runs"][0]["output_tokens"], grpc.parsed["runs"][0]["output_tokens"]);

  const LoadgenRun chat = Loadgen("--api openai --endpoint chat --model tiny --server " + Url() + "/v1" + kWorkload);
  ASSERT_EQ(chat.exit_code, 0) << chat.output;
  ExpectCompleteRun(chat.parsed, "openai chat");
}

// A sampled workload (each request with its own seed) over both APIs: every request completes at
// its exact length, and the report says how it sampled; a bad sampling flag fails before any load.
TEST_F(LoadgenOpenAi, SampledWorkloadOverBothApis) {
  const std::string sampling = " --temperature 0.8 --top-p 0.9 --top-k 40";
  const LoadgenRun http = Loadgen("--api openai --server " + Url() + kWorkload + sampling);
  ASSERT_EQ(http.exit_code, 0) << http.output;
  ExpectCompleteRun(http.parsed, "openai sampled");
  EXPECT_NEAR(http.parsed["sampling"]["temperature"].get<double>(), 0.8, 1e-6);
  EXPECT_NEAR(http.parsed["sampling"]["top_p"].get<double>(), 0.9, 1e-6);
  EXPECT_EQ(http.parsed["sampling"]["top_k"], 40);
  const LoadgenRun grpc = Loadgen("--server " + server_->grpc_target() + kWorkload + sampling);
  ASSERT_EQ(grpc.exit_code, 0) << grpc.output;
  ExpectCompleteRun(grpc.parsed, "grpc sampled");
  const LoadgenRun bad = Loadgen(
      "--server " + server_->grpc_target() + kWorkload + " --temperature 1 --top-p 0", true);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("--top-p must be in (0, 1]"), std::string::npos) << bad.output;
}

TEST_F(LoadgenOpenAi, OpenLoopCountsAddUp) {
  const LoadgenRun open = Loadgen("--api openai --server " + Url() +
                           " --json --rate 50 --requests 6 --prompt-tokens 8 --output-tokens 3 --warmup 0 --seed 2");
  ASSERT_EQ(open.exit_code, 0) << open.output;
  EXPECT_EQ(open.parsed["runs"][0]["sent"], 6);
  EXPECT_EQ(open.parsed["runs"][0]["completed"], 6);
  EXPECT_EQ(open.parsed["runs"][0]["output_tokens"], 18);
}

TEST_F(LoadgenOpenAi, RefusedRequestsAreFailuresNamedByStatusAndMessage) {
  const LoadgenRun wrong = Loadgen("--api openai --model wrong --server " + Url() +
                            " --json --requests 3 --prompt-tokens 4 --output-tokens 2 --warmup 0");
  ASSERT_EQ(wrong.exit_code, 0) << wrong.output;
  const json& run = wrong.parsed["runs"][0];
  EXPECT_EQ(run["sent"], 3);
  EXPECT_EQ(run["completed"], 0);
  EXPECT_EQ(run["failed"], 3);
  ASSERT_EQ(run["errors"].size(), 1u) << run["errors"].dump();
  const std::string name = run["errors"].begin().key();
  EXPECT_EQ(name.rfind("HTTP 404: ", 0), 0u) << name;
  EXPECT_NE(name.find("\"wrong\""), std::string::npos) << name;
  EXPECT_EQ(run["errors"][name], 3);

  // And in the text summary.
  const LoadgenRun text = Loadgen("--api openai --model wrong --server " + Url() +
                           " --requests 2 --prompt-tokens 4 --output-tokens 2 --warmup 0");
  EXPECT_NE(text.output.find("Failed requests:                         2"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("HTTP 404: model: \"wrong\""), std::string::npos) << text.output;
}

TEST_F(LoadgenOpenAi, ClearErrorsBeforeAnyLoad) {
  const LoadgenRun bare = Loadgen("--api openai --server 127.0.0.1:1 --requests 1", true);
  EXPECT_EQ(bare.exit_code, 2);
  EXPECT_NE(bare.output.find("--api openai takes a URL"), std::string::npos) << bare.output;
  const LoadgenRun tls_over_http = Loadgen("--api openai --server " + Url() + " --tls-ca /nonexistent --requests 1", true);
  EXPECT_EQ(tls_over_http.exit_code, 2);
  EXPECT_NE(tls_over_http.output.find("TLS needs https://"), std::string::npos) << tls_over_http.output;
  const LoadgenRun grpc_model = Loadgen("--server " + server_->grpc_target() + " --model tiny --requests 1", true);
  EXPECT_EQ(grpc_model.exit_code, 2);
  EXPECT_NE(grpc_model.output.find("--model and --endpoint are for --api openai"), std::string::npos);
}

TEST(LoadgenOpenAiNoServer, UnreachableServerIsNamed) {
  // Port 1 on loopback: nothing listens there (tests never leave loopback).
  const LoadgenRun run = Loadgen("--api openai --server http://127.0.0.1:1 --requests 1", true);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.output.find("cannot reach http://127.0.0.1:1"), std::string::npos) << run.output;
}

// https with the CA that signed the server's certificate, and the API key as Authorization: Bearer.
TEST(LoadgenOpenAiSecure, HttpsWithApiKey) {
  ASSERT_TRUE(testing::ProgramInstalled("openssl", "openssl"));
  testing::TempDir dir;
  const std::string d = dir.path().string();
  // A self-signed certificate for 127.0.0.1 that is its own CA.
  const std::string make_cert = "openssl req -x509 -newkey rsa:2048 -nodes -keyout " + d + "/server.key -out " + d +
                                "/server.pem -days 2 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 "
                                ">/dev/null 2>&1";
  ASSERT_EQ(std::system(make_cert.c_str()), 0);
  testing::WriteFile(d + "/key", "loadgen-test-key-0123456789abcdef\n");
  ServerProcess server;
  ASSERT_TRUE(server.Start(ServeArgs({"--tls-cert", d + "/server.pem", "--tls-key", d + "/server.key",
                                      "--api-key-file", d + "/key"})))
      << server.log();
  const std::string url = " --server https://127.0.0.1:" + std::to_string(server.http_port());
  const std::string tls = " --tls-ca " + d + "/server.pem";
  const LoadgenRun ok = Loadgen("--api openai" + url + tls + " --api-key-file " + d + "/key" + kWorkload);
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  ExpectCompleteRun(ok.parsed, "https with key");

  testing::WriteFile(d + "/wrong", "not-the-key-0123456789abcdef\n");
  const LoadgenRun refused = Loadgen("--api openai --model tiny" + url + tls + " --api-key-file " + d + "/wrong" +
                              " --json --requests 2 --prompt-tokens 4 --output-tokens 2 --warmup 0");
  ASSERT_EQ(refused.exit_code, 0) << refused.output;
  ASSERT_EQ(refused.parsed["runs"][0]["errors"].size(), 1u) << refused.output;
  EXPECT_EQ(refused.parsed["runs"][0]["errors"].begin().key().rfind("HTTP 401: ", 0), 0u) << refused.output;
  EXPECT_EQ(refused.parsed["runs"][0]["failed"], 2);
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

}  // namespace
}  // namespace tpserve
