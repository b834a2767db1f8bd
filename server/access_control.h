// Who may call the server: an API key that every call of tpserve.v1.TpServe must carry as
// `authorization: Bearer KEY` (health stays open, as probes need), compared in constant time; and
// the TLS credentials of the listening port (--tls-cert/--tls-key, with --tls-client-ca every
// client must present a certificate that CA signed).
#pragma once

#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tpserve {

struct AccessOptions {
  std::string api_key_file;
  std::string tls_cert, tls_key, tls_client_ca;  // PEM files
};

class AccessControl {
 public:
  // Reads the files; errors name the flag and the file.
  static Result<AccessControl> Create(const AccessOptions& options);

  // The `authorization` metadata of a call (empty when absent) against the key: Ok, or
  // UNAUTHENTICATED saying what is wrong (never the key). Ok when no key is configured.
  Status CheckAuthorization(std::string_view authorization) const;
  bool requires_key() const { return !key_.empty(); }

  // TLS when a certificate was given, else plaintext.
  std::shared_ptr<grpc::ServerCredentials> Credentials() const;
  bool tls() const { return !cert_.empty(); }

 private:
  std::string key_;
  std::string cert_, private_key_, client_ca_;
};

// a == b in time that depends only on the lengths.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace tpserve
