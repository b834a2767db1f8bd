// How the clients (client, loadgen, health) reach a server: plain or TLS (a CA to trust, and a
// client certificate where the server asks for one), with the API key sent as
// `authorization: Bearer KEY` on every call (the convention of OpenAI-style servers). loadgen's
// --api openai reads the same flags for HTTPS (clients/openai_load_target.h).
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "common/status.h"

namespace CLI {
class App;
}

namespace tpserve {

struct ConnectionOptions {
  std::string tls_ca;        // PEM: the CA that signed the server's certificate; set: TLS
  std::string tls_cert;      // PEM: this client's certificate (servers with --tls-client-ca)
  std::string tls_key;       // PEM: its key
  std::string api_key_file;  // the key, alone in the file (surrounding whitespace ignored)
};

// --tls-ca, --tls-cert, --tls-key, --api-key-file.
void AddConnectionFlags(CLI::App* cmd, ConnectionOptions* options);

class Connection {
 public:
  // Reads the files; an error names the flag and the file.
  static Result<Connection> Open(const std::string& target, const ConnectionOptions& options);

  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  // Adds the API key (if any) to a call's metadata.
  void Authorize(grpc::ClientContext* context) const;

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::string bearer_;  // "Bearer KEY", or empty
};

// The file's contents (PEM files, key files); an error names `flag` and the path.
Result<std::string> ReadSecretFile(const std::string& flag, const std::string& path);
// --api-key-file's key: the file's contents without surrounding whitespace; empty is an error.
Result<std::string> ReadApiKeyFile(const std::string& path);

}  // namespace tpserve
