#include "runner/certs_command.h"

#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "runner/results.h"
#include "runner/wiring.h"
#include "transport/certs.h"

namespace quartet::runner {

namespace fs = std::filesystem;

CLI::App* add_certs_command(CLI::App& app, CertsOptions& options) {
  CLI::App* cmd = app.add_subcommand(
      "certs", "Make a test CA and the server and client certificates for runs over TLS (docs/transport.md)");
  cmd->add_option("--out", options.out, "folder to write them to (must not exist, or be empty)")->required();
  cmd->add_option("--hosts", options.hosts,
                  "addresses and names the server certificate is valid for, comma-separated: every address "
                  "roles connect to (the coordinator's --listen host)");
  cmd->add_option("--days", options.days, "days the certificates are valid (1 to 3650)");
  return cmd;
}

int certs_main(const CertsOptions& options) {
  transport::CertificateOptions co;
  co.hosts.clear();
  std::stringstream list(options.hosts);
  for (std::string host; std::getline(list, host, ',');) {
    if (host.empty() || host.find_first_of(" \t/,") != std::string::npos)
      throw InputError("--hosts: \"" + options.hosts + "\": expected addresses or names separated by commas, "
                       "without spaces");
    co.hosts.push_back(host);
  }
  if (co.hosts.empty()) throw InputError("--hosts: expected at least one address or name");
  if (options.days < 1 || options.days > 3650)
    throw InputError("--days: expected 1 to 3650, got " + std::to_string(options.days));
  co.days = options.days;
  const fs::path out = options.out;
  if (fs::exists(out) && !(fs::is_directory(out) && fs::is_empty(out)))
    throw InputError("--out " + out.string() + ": exists and is not an empty folder");
  fs::create_directories(out);
  const transport::CertificateSet set = transport::make_certificates(co);
  write_file_atomically(out / "ca.pem", set.ca_cert);
  write_file_atomically(out / "ca.key", set.ca_key, 0600);
  write_file_atomically(out / "server.pem", set.server_cert);
  write_file_atomically(out / "server.key", set.server_key, 0600);
  write_file_atomically(out / "client.pem", set.client_cert);
  write_file_atomically(out / "client.key", set.client_key, 0600);
  const std::string dir = fs::absolute(out).lexically_normal().string();
  std::cout << "quartet certs: wrote ca.pem, server.pem, client.pem and their keys to " << dir << " (for "
            << options.hosts << ", " << options.days << " days)\n"
            << "  every host: QUARTET_TLS_CERT=" << dir << "/server.pem QUARTET_TLS_KEY=" << dir
            << "/server.key QUARTET_TLS_CA=" << dir << "/ca.pem\n"
            << "  mutual authentication: also QUARTET_TLS_CLIENT_CA=" << dir << "/ca.pem\n";
  return 0;
}

void add_tls_options(CLI::App& command, transport::TlsFiles& files) {
  command.add_option("--tls-cert", files.cert, "TLS: this host's certificate chain (PEM; default QUARTET_TLS_CERT)");
  command.add_option("--tls-key", files.key, "TLS: its private key (PEM; default QUARTET_TLS_KEY)");
  command.add_option("--tls-ca", files.ca, "TLS: the CA servers' certificates must chain to (default QUARTET_TLS_CA)");
  command.add_option("--tls-client-ca", files.client_ca,
                     "TLS: require client certificates from this CA (mutual authentication; default "
                     "QUARTET_TLS_CLIENT_CA)");
}

std::shared_ptr<const transport::Tls> load_tls(const transport::TlsFiles& flags) {
  try {
    const bool any_flag = !flags.cert.empty() || !flags.key.empty() || !flags.ca.empty() || !flags.client_ca.empty();
    transport::TlsFiles files;
    if (any_flag) {
      files = flags;
    } else if (const auto from_env = transport::Tls::from_environment()) {
      files = from_env->files();
    } else {
      return nullptr;
    }
    for (std::string* path : {&files.cert, &files.key, &files.ca, &files.client_ca})
      if (!path->empty()) *path = fs::absolute(*path).lexically_normal().string();
    return std::make_shared<const transport::Tls>(std::move(files));
  } catch (const std::invalid_argument& e) {
    throw InputError(e.what());
  }
}

}  // namespace quartet::runner
