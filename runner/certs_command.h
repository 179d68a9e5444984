#pragma once

// `quartet certs`: a test CA and the certificates a run over TLS needs (transport/certs.h),
// and the --tls-* options that `quartet run` and `quartet role` share.

#include <memory>
#include <string>

#include "transport/tls.h"

namespace CLI {
class App;
}

namespace quartet::runner {

struct CertsOptions {
  std::string out;                           // a folder that does not exist yet, or is empty
  std::string hosts = "127.0.0.1,localhost";  // the server certificate's names, comma-separated
  int days = 365;
};

// Adds the `certs` subcommand to `app`, bound to `options`.
CLI::App* add_certs_command(CLI::App& app, CertsOptions& options);

// Writes ca.pem, server.pem, client.pem and their keys (ca.key, server.key, client.key,
// mode 0600), each atomically, and prints what it wrote and how to use it. Returns 0;
// throws InputError (exit code 2) for a bad --hosts, --days or a non-empty folder.
int certs_main(const CertsOptions& options);

// Adds --tls-cert, --tls-key, --tls-ca and --tls-client-ca (file paths) to `command`.
void add_tls_options(CLI::App& command, transport::TlsFiles& files);

// The TLS settings of a run or a role: the --tls-* options when any is given, else
// QUARTET_TLS_CERT, QUARTET_TLS_KEY, QUARTET_TLS_CA and QUARTET_TLS_CLIENT_CA; nullptr
// for plain TCP. Paths are made absolute. Throws InputError naming the bad setting.
std::shared_ptr<const transport::Tls> load_tls(const transport::TlsFiles& flags);

}  // namespace quartet::runner
