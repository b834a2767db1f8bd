#include "clients/connection.h"

#include <CLI/CLI.hpp>

#include <fstream>
#include <sstream>

namespace tpserve {

Result<std::string> ReadSecretFile(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgument(flag + " " + path + ": cannot read the file");
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

Result<std::string> ReadApiKeyFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string key, ReadSecretFile("--api-key-file", path));
  const size_t first = key.find_first_not_of(" \t\r\n");
  const size_t last = key.find_last_not_of(" \t\r\n");
  if (first == std::string::npos) return InvalidArgument("--api-key-file " + path + ": the file is empty");
  return key.substr(first, last - first + 1);
}

void AddConnectionFlags(CLI::App* cmd, ConnectionOptions* options) {
  cmd->add_option("--tls-ca", options->tls_ca, "Connect over TLS, trusting this CA (PEM file)");
  cmd->add_option("--tls-cert", options->tls_cert, "This client's certificate (PEM file), for servers that check one");
  cmd->add_option("--tls-key", options->tls_key, "The client certificate's key (PEM file)");
  cmd->add_option("--api-key-file", options->api_key_file,
                  "Send the key in this file as 'authorization: Bearer KEY' on every call");
}

Result<Connection> Connection::Open(const std::string& target, const ConnectionOptions& options) {
  Connection connection;
  if (!options.api_key_file.empty()) {
    ASSIGN_OR_RETURN(std::string key, ReadApiKeyFile(options.api_key_file));
    connection.bearer_ = "Bearer " + key;
  }
  if ((options.tls_cert.empty()) != (options.tls_key.empty())) {
    return InvalidArgument("--tls-cert and --tls-key go together");
  }
  if (options.tls_ca.empty()) {
    if (!options.tls_cert.empty()) return InvalidArgument("--tls-cert needs --tls-ca (the server's CA)");
    connection.channel_ = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
    return connection;
  }
  grpc::SslCredentialsOptions ssl;
  ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadSecretFile("--tls-ca", options.tls_ca));
  if (!options.tls_cert.empty()) {
    ASSIGN_OR_RETURN(ssl.pem_cert_chain, ReadSecretFile("--tls-cert", options.tls_cert));
    ASSIGN_OR_RETURN(ssl.pem_private_key, ReadSecretFile("--tls-key", options.tls_key));
  }
  connection.channel_ = grpc::CreateChannel(target, grpc::SslCredentials(ssl));
  return connection;
}

void Connection::Authorize(grpc::ClientContext* context) const {
  if (!bearer_.empty()) context->AddMetadata("authorization", bearer_);
}

}  // namespace tpserve
