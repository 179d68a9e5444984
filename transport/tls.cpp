#include "transport/tls.h"

#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>

#include <asio/ip/address.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <system_error>

namespace quartet::transport {

namespace {

// OpenSSL's error queue as one line, oldest first; empties it.
std::string openssl_errors() {
  std::string text;
  while (const unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    const char* reason = ERR_reason_error_string(e);
    text += (text.empty() ? "" : "; ") + std::string(reason != nullptr ? reason : buf);
  }
  return text;
}

void check_readable(const std::string& setting, const std::string& path) {
  if (path.empty()) return;
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("tls " + setting + " " + path + ": cannot read: " + std::strerror(errno));
}

void check(const asio::error_code& ec, const std::string& setting, const std::string& path) {
  if (ec)
    throw std::invalid_argument("tls " + setting + " " + path + ": " + ec.message() +
                                " (expected a PEM file; quartet certs makes a set)");
}

void load_identity(asio::ssl::context& context, const TlsFiles& files) {
  asio::error_code ec;
  context.use_certificate_chain_file(files.cert, ec);
  check(ec, "cert", files.cert);
  context.use_private_key_file(files.key, asio::ssl::context::pem, ec);
  check(ec, "key", files.key);
  if (SSL_CTX_check_private_key(context.native_handle()) != 1)
    throw std::invalid_argument("tls key " + files.key + ": does not match the certificate in " + files.cert);
}

void set_common(asio::ssl::context& context) {
  SSL_CTX* ctx = context.native_handle();
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  // A peer that closes without close_notify reads as end of stream: frames carry their
  // length and CRC, so a truncated one is still caught.
  SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
}

// A BIO over a socket that sends with MSG_NOSIGNAL: a peer gone must be an error, not a
// SIGPIPE that kills the process (OpenSSL's socket BIO writes with write()).
int bio_write(BIO* bio, const char* data, size_t size, size_t* written) {
  BIO_clear_retry_flags(bio);
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(BIO_get_data(bio)));
  for (;;) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n >= 0) {
      *written = static_cast<size_t>(n);
      return 1;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_write(bio);
    return 0;
  }
}

int bio_read(BIO* bio, char* data, size_t size, size_t* read) {
  BIO_clear_retry_flags(bio);
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(BIO_get_data(bio)));
  for (;;) {
    const ssize_t n = ::recv(fd, data, size, 0);
    if (n > 0) {
      *read = static_cast<size_t>(n);
      return 1;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) BIO_set_retry_read(bio);
    if (n == 0) errno = 0;  // end of stream
    return 0;
  }
}

long bio_ctrl(BIO*, int command, long, void*) { return command == BIO_CTRL_FLUSH ? 1 : 0; }

int bio_create(BIO* bio) {
  BIO_set_init(bio, 1);
  return 1;
}

BIO_METHOD* socket_method() {
  // Made once, kept for the process (sessions may end during static destruction).
  static BIO_METHOD* method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "quartet socket");
    BIO_meth_set_write_ex(m, bio_write);
    BIO_meth_set_read_ex(m, bio_read);
    BIO_meth_set_ctrl(m, bio_ctrl);
    BIO_meth_set_create(m, bio_create);
    return m;
  }();
  return method;
}

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

}  // namespace

Tls::Tls(TlsFiles files)
    : files_(std::move(files)), server_(asio::ssl::context::tls_server), client_(asio::ssl::context::tls_client) {
  if (files_.ca.empty()) throw std::invalid_argument("tls ca: required (the CA that servers' certificates chain to)");
  if (files_.cert.empty() != files_.key.empty())
    throw std::invalid_argument("tls cert and key: give both or neither");
  check_readable("cert", files_.cert);
  check_readable("key", files_.key);
  check_readable("ca", files_.ca);
  check_readable("client-ca", files_.client_ca);
  set_common(client_);
  set_common(server_);
  asio::error_code ec;
  client_.load_verify_file(files_.ca, ec);
  check(ec, "ca", files_.ca);
  client_.set_verify_mode(asio::ssl::verify_peer);
  // Servers send no session tickets: nothing but frames follows the handshake, so one
  // thread's read never has to write.
  SSL_CTX_set_num_tickets(server_.native_handle(), 0);
  if (has_certificate()) {
    load_identity(client_, files_);
    load_identity(server_, files_);
  }
  if (mutual()) {
    server_.load_verify_file(files_.client_ca, ec);
    check(ec, "client-ca", files_.client_ca);
    server_.set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert);
  }
}

SSL_CTX* Tls::server_context() const {
  if (!has_certificate()) throw std::invalid_argument("a TLS server needs a certificate and key (tls cert, tls key)");
  return server_.native_handle();
}

std::shared_ptr<const Tls> Tls::from_environment() {
  TlsFiles f;
  const char* cert = env("QUARTET_TLS_CERT");
  const char* key = env("QUARTET_TLS_KEY");
  const char* ca = env("QUARTET_TLS_CA");
  const char* client_ca = env("QUARTET_TLS_CLIENT_CA");
  if (!cert && !key && !ca && !client_ca) return nullptr;
  for (const auto& [name, value] : {std::pair{"QUARTET_TLS_CERT", cert}, {"QUARTET_TLS_KEY", key},
                                    {"QUARTET_TLS_CA", ca}})
    if (value == nullptr)
      throw std::invalid_argument(std::string(name) +
                                  ": not set; TLS needs QUARTET_TLS_CERT, QUARTET_TLS_KEY and QUARTET_TLS_CA "
                                  "(QUARTET_TLS_CLIENT_CA optional), or none of them for plain TCP");
  f.cert = cert;
  f.key = key;
  f.ca = ca;
  if (client_ca) f.client_ca = client_ca;
  return std::make_shared<const Tls>(std::move(f));
}

TlsSession::TlsSession(SSL_CTX* context, int fd) {
  ssl_ = SSL_new(context);
  BIO* bio = ssl_ != nullptr ? BIO_new(socket_method()) : nullptr;
  if (bio == nullptr) {
    SSL_free(ssl_);
    throw std::runtime_error("cannot start a TLS session: " + openssl_errors());
  }
  BIO_set_data(bio, reinterpret_cast<void*>(static_cast<intptr_t>(fd)));
  SSL_set_bio(ssl_, bio, bio);
}

TlsSession::~TlsSession() { SSL_free(ssl_); }

std::unique_ptr<TlsSession> TlsSession::client(const Tls& tls, int fd, const std::string& verify_host) {
  std::unique_ptr<TlsSession> s(new TlsSession(tls.client_context(), fd));
  X509_VERIFY_PARAM* param = SSL_get0_param(s->ssl_);
  asio::error_code ec;
  asio::ip::make_address(verify_host, ec);
  if (!ec) {
    X509_VERIFY_PARAM_set1_ip_asc(param, verify_host.c_str());
  } else {
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    X509_VERIFY_PARAM_set1_host(param, verify_host.c_str(), verify_host.size());
    SSL_set_tlsext_host_name(s->ssl_, verify_host.c_str());
  }
  SSL_set_connect_state(s->ssl_);
  return s;
}

std::unique_ptr<TlsSession> TlsSession::server(const Tls& tls, int fd) {
  std::unique_ptr<TlsSession> s(new TlsSession(tls.server_context(), fd));
  SSL_set_accept_state(s->ssl_);
  return s;
}

TlsSession::Want TlsSession::want_of(int result, const std::string& what) {
  const int error = SSL_get_error(ssl_, result);
  if (error == SSL_ERROR_WANT_READ) return Want::read;
  if (error == SSL_ERROR_WANT_WRITE) return Want::write;
  const int saved_errno = errno;
  std::string why = openssl_errors();
  const long verify = SSL_get_verify_result(ssl_);
  if (verify != X509_V_OK) why += std::string(" (") + X509_verify_cert_error_string(verify) + ")";
  if (why.empty())
    why = error == SSL_ERROR_SYSCALL && saved_errno != 0 ? std::strerror(saved_errno) : "the peer closed the connection";
  throw TlsError(what + " failed: " + why);
}

TlsSession::Want TlsSession::handshake(const std::string& peer) {
  ERR_clear_error();
  const int r = SSL_do_handshake(ssl_);
  if (r == 1) return Want::done;
  return want_of(r, "TLS handshake with " + peer);
}

TlsSession::Io TlsSession::read(std::span<std::byte> out) {
  ERR_clear_error();
  size_t n = 0;
  const int r = SSL_read_ex(ssl_, out.data(), out.size(), &n);
  if (r == 1) return {Want::done, n};
  const int error = SSL_get_error(ssl_, r);
  // End of stream, or a reset: Connection tells a closed peer from a truncated frame.
  if (error == SSL_ERROR_ZERO_RETURN ||
      (error == SSL_ERROR_SYSCALL && (errno == 0 || errno == ECONNRESET || errno == EPIPE)))
    return {Want::done, 0};
  return {want_of(r, "TLS read"), 0};
}

TlsSession::Io TlsSession::write(std::span<const std::byte> in) {
  ERR_clear_error();
  size_t n = 0;
  const int r = SSL_write_ex(ssl_, in.data(), in.size(), &n);
  if (r == 1) return {Want::done, n};
  const int error = SSL_get_error(ssl_, r);
  if (error == SSL_ERROR_SYSCALL && errno != 0) throw std::system_error(errno, std::generic_category(), "TLS write");
  return {want_of(r, "TLS write"), 0};
}

uint64_t TlsSession::raw_bytes_read() const { return BIO_number_read(SSL_get_rbio(ssl_)); }
uint64_t TlsSession::raw_bytes_written() const { return BIO_number_written(SSL_get_wbio(ssl_)); }

}  // namespace quartet::transport
