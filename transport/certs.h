#pragma once

// A test CA and the certificates a run needs, made with OpenSSL's API (ECDSA P-256,
// SHA-256): `quartet certs` writes them, tests make their own.

#include <string>
#include <vector>

namespace quartet::transport {

struct CertificateOptions {
  // The server certificate's subject alternative names: IP addresses become IP SANs,
  // anything else a DNS SAN. Clients check the host they connect to against them.
  std::vector<std::string> hosts = {"127.0.0.1", "localhost"};
  // Validity from an hour ago; days < 0 makes certificates that have already expired
  // (tests of the refusal).
  int days = 365;
};

// PEM text. The server certificate serves and connects (serverAuth and clientAuth), so a
// role that is both a server and a coordinator client needs one; the client certificate
// only connects (clientAuth).
struct CertificateSet {
  std::string ca_cert, ca_key;
  std::string server_cert, server_key;
  std::string client_cert, client_key;
};

// Throws std::runtime_error with OpenSSL's reason.
CertificateSet make_certificates(const CertificateOptions& options);

}  // namespace quartet::transport
