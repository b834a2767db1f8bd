// Access control with the real server on loopback: the API key (every TpServe call without it or
// with a wrong one gets UNAUTHENTICATED and does no engine work; health stays open) and TLS (a CA
// and certificates made in the test with openssl; plaintext clients refused; mutual TLS refuses a
// client without a certificate). The clients are the real ones: gRPC stubs and `tpserve client /
// health` with --tls-ca, --tls-cert, --tls-key and --api-key-file.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "tests/engine/engine_test_util.h"
#include "tests/server/server_process.h"
#include "tpserve/v1/tpserve.grpc.pb.h"

namespace tpserve {
namespace {

using testing::ServerProcess;

constexpr char kKey[] = "tpserve-test-key-0123456789abcdef";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Runs a shell command; its stdout, and its exit status in *status.
std::string Shell(const std::string& command, int* status) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  std::string out;
  char buffer[4096];
  for (size_t n; pipe != nullptr && (n = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) out.append(buffer, n);
  const int raw = pipe != nullptr ? pclose(pipe) : -1;
  *status = raw >= 0 && WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return out;
}

std::vector<std::string> ServeArgs(std::vector<std::string> extra) {
  std::vector<std::string> args = {"serve", "--model", testing::TinyModelPath(), "--port", "0",
                                   "--metrics-port", "0", "--threads", "2", "--tp", "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

grpc::Status GenerateWith(v1::TpServe::Stub& stub, const std::string& authorization, std::string* text = nullptr) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  if (!authorization.empty()) context.AddMetadata("authorization", authorization);
  v1::GenerateRequest request;
  request.set_text("Hello");
  request.set_max_tokens(3);
  auto reader = stub.Generate(&context, request);
  v1::GenerateResponse response;
  while (reader->Read(&response)) {
    if (text) *text += response.text();
  }
  return reader->Finish();
}

int64_t Steps(v1::TpServe::Stub& stub, const std::string& authorization) {
  grpc::ClientContext context;
  if (!authorization.empty()) context.AddMetadata("authorization", authorization);
  v1::StatsResponse stats;
  const grpc::Status status = stub.Stats(&context, v1::StatsRequest(), &stats);
  return status.ok() ? stats.steps() : -1;
}

TEST(ApiKey, EveryCallNeedsTheKeyHealthStaysOpenAndRefusedCallsDoNoWork) {
  testing::TempDir dir;
  const std::string key_file = (dir.path() / "key").string();
  std::ofstream(key_file) << kKey << "\n";
  ServerProcess server;
  ASSERT_TRUE(server.Start(ServeArgs({"--api-key-file", key_file}))) << server.log();
  auto stub = v1::TpServe::NewStub(grpc::CreateChannel(server.grpc_target(), grpc::InsecureChannelCredentials()));
  const std::string good = std::string("Bearer ") + kKey;

  for (const std::string& bad : {std::string(), std::string("Bearer wrong-key-0123456789abcdef"),
                                 std::string("Bearer ") + kKey + "x", std::string(kKey), std::string("Basic abc")}) {
    const grpc::Status status = GenerateWith(*stub, bad);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << "'" << bad << "': " << status.error_message();
    EXPECT_EQ(status.error_message().find(kKey), std::string::npos) << "the error must not echo the key";
    grpc::ClientContext context;
    if (!bad.empty()) context.AddMetadata("authorization", bad);
    v1::ModelInfoResponse info;
    EXPECT_EQ(stub->ModelInfo(&context, v1::ModelInfoRequest(), &info).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(Steps(*stub, bad), -1);
  }
  EXPECT_EQ(Steps(*stub, good), 0) << "refused calls ran no engine step";
  std::string text;
  const grpc::Status ok = GenerateWith(*stub, good, &text);
  EXPECT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_GT(Steps(*stub, good), 0);

  // The real clients: health without a key; client with and without --api-key-file.
  int status = 0;
  const std::string binary = testing::TpserveBinary();
  EXPECT_NE(Shell(binary + " health --target " + server.grpc_target(), &status).find("SERVING"), std::string::npos);
  EXPECT_EQ(status, 0);
  const std::string refused = Shell(binary + " client --target " + server.grpc_target() + " --prompt hi --max-tokens 2", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(refused.find("UNAUTHENTICATED"), std::string::npos) << refused;
  Shell(binary + " client --target " + server.grpc_target() + " --prompt hi --max-tokens 2 --api-key-file " + key_file,
        &status);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

TEST(ApiKey, AShortOrMissingKeyFileIsRefusedAtStartNamingTheFile) {
  testing::TempDir dir;
  const std::string key_file = (dir.path() / "short").string();
  std::ofstream(key_file) << "abc\n";
  int status = 0;
  const std::string binary = testing::TpserveBinary();
  std::string out = Shell(binary + " serve --model " + testing::TinyModelPath() + " --port 0 --metrics-port 0 --api-key-file " +
                              key_file, &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("too easy to guess"), std::string::npos) << out;
  out = Shell(binary + " serve --model " + testing::TinyModelPath() + " --port 0 --metrics-port 0 --api-key-file " +
                  (dir.path() / "nope").string(), &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("nope: cannot read the file"), std::string::npos) << out;
}

TEST(Limits, MaxNewTokensCapsARequestsMaxTokens) {
  ServerProcess server;
  ASSERT_TRUE(server.Start(ServeArgs({"--max-new-tokens", "8"}))) << server.log();
  auto stub = v1::TpServe::NewStub(grpc::CreateChannel(server.grpc_target(), grpc::InsecureChannelCredentials()));
  for (int max_tokens : {8, 9}) {
    grpc::ClientContext context;
    v1::GenerateRequest request;
    request.set_text("Hello");
    request.set_max_tokens(max_tokens);
    auto reader = stub->Generate(&context, request);
    v1::GenerateResponse response;
    while (reader->Read(&response)) {}
    const grpc::Status status = reader->Finish();
    if (max_tokens == 8) {
      EXPECT_TRUE(status.ok()) << status.error_message();
    } else {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
      EXPECT_NE(status.error_message().find("max_tokens: 9 is over this server's limit of 8 (--max-new-tokens)"),
                std::string::npos)
          << status.error_message();
    }
  }
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

// A CA, a server certificate for 127.0.0.1 and a client certificate, made with openssl.
struct Certificates {
  testing::TempDir dir;
  std::string Path(const std::string& name) const { return (dir.path() / name).string(); }
  bool Make() {
    if (auto installed = testing::ProgramInstalled("openssl", "openssl"); !installed) {
      ADD_FAILURE() << installed.message();
      return false;
    }
    const std::string d = dir.path().string();
    const std::string script =
        "set -e; cd " + d +
        "; openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=tpserve-test-ca"
        "; openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=127.0.0.1"
        "; printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > san.ext"
        "; openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 "
        "-extfile san.ext"
        "; openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr -subj /CN=tpserve-test-client"
        "; openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem -days 2";
    int status = 0;
    const std::string out = Shell("bash -c \"" + script + "\"", &status);
    if (status != 0) ADD_FAILURE() << "openssl: " << out;
    return status == 0;
  }
};

TEST(Tls, TlsClientsAreServedPlaintextOnesAreNot) {
  Certificates certs;
  ASSERT_TRUE(certs.Make());
  ServerProcess server;
  ASSERT_TRUE(server.Start(ServeArgs({"--tls-cert", certs.Path("server.pem"), "--tls-key", certs.Path("server.key")})))
      << server.log();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ReadFile(certs.Path("ca.pem"));
  auto secure = v1::TpServe::NewStub(grpc::CreateChannel(server.grpc_target(), grpc::SslCredentials(ssl)));
  std::string text;
  const grpc::Status ok = GenerateWith(*secure, "", &text);
  EXPECT_TRUE(ok.ok()) << ok.error_message();
  auto plain = v1::TpServe::NewStub(grpc::CreateChannel(server.grpc_target(), grpc::InsecureChannelCredentials()));
  EXPECT_EQ(GenerateWith(*plain, "").error_code(), grpc::StatusCode::UNAVAILABLE);

  int status = 0;
  const std::string binary = testing::TpserveBinary();
  const std::string health =
      Shell(binary + " health --target " + server.grpc_target() + " --tls-ca " + certs.Path("ca.pem"), &status);
  EXPECT_EQ(status, 0) << health;
  EXPECT_NE(health.find("SERVING"), std::string::npos) << health;
  Shell(binary + " client --target " + server.grpc_target() + " --prompt hi --max-tokens 2 --tls-ca " + certs.Path("ca.pem"),
        &status);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

TEST(Tls, MutualTlsRefusesAClientWithoutACertificate) {
  Certificates certs;
  ASSERT_TRUE(certs.Make());
  ServerProcess server;
  ASSERT_TRUE(server.Start(ServeArgs({"--tls-cert", certs.Path("server.pem"), "--tls-key", certs.Path("server.key"),
                                      "--tls-client-ca", certs.Path("ca.pem"), "--http-port", "0"})))
      << server.log();
  // The HTTP port asks for the same client certificate (openssl s_client as the client).
  const auto https_health = [&](const std::string& client_files) {
    int exit_status = 0;
    return Shell("printf 'GET /health HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n' | timeout 20 "
                 "openssl s_client -quiet -connect 127.0.0.1:" + std::to_string(server.http_port()) + " -CAfile " +
                     certs.Path("ca.pem") + client_files + " 2>/dev/null",
                 &exit_status);
  };
  const std::string with_certificate =
      https_health(" -cert " + certs.Path("client.pem") + " -key " + certs.Path("client.key"));
  EXPECT_NE(with_certificate.find("HTTP/1.1 200"), std::string::npos) << with_certificate;
  const std::string without_certificate = https_health("");
  EXPECT_EQ(without_certificate.find("HTTP/1.1"), std::string::npos) << without_certificate;
  grpc::SslCredentialsOptions anonymous;
  anonymous.pem_root_certs = ReadFile(certs.Path("ca.pem"));
  auto without = v1::TpServe::NewStub(grpc::CreateChannel(server.grpc_target(), grpc::SslCredentials(anonymous)));
  EXPECT_EQ(GenerateWith(*without, "").error_code(), grpc::StatusCode::UNAVAILABLE);
  grpc::SslCredentialsOptions with = anonymous;
  with.pem_cert_chain = ReadFile(certs.Path("client.pem"));
  with.pem_private_key = ReadFile(certs.Path("client.key"));
  auto stub = v1::TpServe::NewStub(grpc::CreateChannel(server.grpc_target(), grpc::SslCredentials(with)));
  const grpc::Status ok = GenerateWith(*stub, "");
  EXPECT_TRUE(ok.ok()) << ok.error_message();
  int status = 0;
  Shell(testing::TpserveBinary() + " client --target " + server.grpc_target() + " --prompt hi --max-tokens 2 --tls-ca " +
            certs.Path("ca.pem") + " --tls-cert " + certs.Path("client.pem") + " --tls-key " + certs.Path("client.key"),
        &status);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

}  // namespace
}  // namespace tpserve
