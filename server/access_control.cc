#include "server/access_control.h"

#include <grpcpp/security/server_credentials.h>

#include "clients/connection.h"

namespace tpserve {

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  // Every byte of the longer string is read whatever the contents; only the lengths show.
  const size_t n = std::max(a.size(), b.size());
  unsigned char difference = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    difference |= static_cast<unsigned char>(x ^ y);
  }
  return difference == 0;
}

Result<AccessControl> AccessControl::Create(const AccessOptions& options) {
  AccessControl access;
  if (!options.api_key_file.empty()) {
    ASSIGN_OR_RETURN(access.key_, ReadApiKeyFile(options.api_key_file));
    if (access.key_.size() < 16) {
      return InvalidArgument("--api-key-file " + options.api_key_file + ": a key of " + std::to_string(access.key_.size()) +
                             " characters is too easy to guess (at least 16)");
    }
  }
  if (options.tls_cert.empty() != options.tls_key.empty()) return InvalidArgument("--tls-cert and --tls-key go together");
  if (!options.tls_client_ca.empty() && options.tls_cert.empty()) {
    return InvalidArgument("--tls-client-ca needs --tls-cert and --tls-key (client certificates need TLS)");
  }
  if (!options.tls_cert.empty()) {
    ASSIGN_OR_RETURN(access.cert_, ReadSecretFile("--tls-cert", options.tls_cert));
    ASSIGN_OR_RETURN(access.private_key_, ReadSecretFile("--tls-key", options.tls_key));
  }
  if (!options.tls_client_ca.empty()) {
    ASSIGN_OR_RETURN(access.client_ca_, ReadSecretFile("--tls-client-ca", options.tls_client_ca));
  }
  return access;
}

Status AccessControl::CheckAuthorization(std::string_view authorization) const {
  if (key_.empty()) return Status::Ok();
  constexpr std::string_view kScheme = "Bearer ";
  if (authorization.empty()) {
    return Status(StatusCode::kUnauthenticated, "this server needs an API key: send 'authorization: Bearer KEY'");
  }
  if (authorization.size() < kScheme.size() || authorization.substr(0, kScheme.size()) != kScheme) {
    return Status(StatusCode::kUnauthenticated, "the authorization metadata is not 'Bearer KEY'");
  }
  if (!ConstantTimeEquals(authorization.substr(kScheme.size()), key_)) {
    return Status(StatusCode::kUnauthenticated, "wrong API key");
  }
  return Status::Ok();
}

std::shared_ptr<grpc::ServerCredentials> AccessControl::Credentials() const {
  if (cert_.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl(client_ca_.empty()
                                            ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                            : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  ssl.pem_key_cert_pairs.push_back({private_key_, cert_});
  ssl.pem_root_certs = client_ca_;
  return grpc::SslServerCredentials(ssl);
}

}  // namespace tpserve
