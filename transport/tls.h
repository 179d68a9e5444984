#pragma once

// TLS for connections that may cross hosts (OpenSSL 3, configured through Asio's
// asio::ssl::context). A Tls holds the run's certificate settings, loaded once; a
// TlsSession is one connection's SSL object over its non-blocking socket, stepped by the
// caller's own wait (Connection's poll with a deadline, the Server's async_wait), so the
// deadlines of plain TCP hold for the handshake and every record alike.
//
// The run token stays a second factor: a TLS connection still opens with a hello that
// carries it.

#include <openssl/ssl.h>

#include <asio/ssl/context.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>

namespace quartet::transport {

// File paths (PEM), never the secrets themselves.
struct TlsFiles {
  std::string cert;       // this end's certificate chain; with key, or both empty
  std::string key;        // its private key
  std::string ca;         // required: the CA a server's certificate must chain to
  std::string client_ca;  // set: servers require a client certificate chaining to it (mutual auth)
};

// A handshake that failed (the peer's certificate did not verify, the peer spoke
// plaintext, no client certificate where one is required); the message names the reason.
class TlsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Tls {
 public:
  // Loads and checks every file; throws std::invalid_argument naming the setting and the
  // file ("tls ca /x/ca.pem: cannot read: No such file or directory").
  explicit Tls(TlsFiles files);
  // From QUARTET_TLS_CERT, QUARTET_TLS_KEY, QUARTET_TLS_CA and QUARTET_TLS_CLIENT_CA:
  // nullptr when none is set (plain TCP); throws std::invalid_argument naming the variable
  // when some are set but cert, key or CA is missing.
  static std::shared_ptr<const Tls> from_environment();

  const TlsFiles& files() const { return files_; }
  bool has_certificate() const { return !files_.cert.empty(); }
  bool mutual() const { return !files_.client_ca.empty(); }
  // TLS 1.2 or later; clients verify the server's chain against `ca`, servers ask for a
  // client certificate (and refuse a connection without one) when mutual().
  // requires has_certificate() for server_context()
  SSL_CTX* server_context() const;
  SSL_CTX* client_context() const { return client_.native_handle(); }

 private:
  TlsFiles files_;
  mutable asio::ssl::context server_;
  mutable asio::ssl::context client_;
};

// One connection's TLS over a socket it does not own. Not thread-safe: Connection
// serialises the calls (the waits between them run unlocked).
class TlsSession {
 public:
  enum class Want { done, read, write };  // what the call needs before it can go on
  struct Io {
    Want want = Want::done;
    size_t bytes = 0;  // moved when want == done; 0 with done: the peer closed
  };

  // The client end verifies the server's certificate for `verify_host` (an IP address
  // against the certificate's IP SANs, a name against its DNS SANs).
  static std::unique_ptr<TlsSession> client(const Tls& tls, int fd, const std::string& verify_host);
  static std::unique_ptr<TlsSession> server(const Tls& tls, int fd);
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  // One step of the handshake; throws TlsError naming the reason, "with `peer`".
  Want handshake(const std::string& peer);
  // One non-blocking read or write. A read returns done with 0 bytes when the peer closed
  // or reset the connection; failures throw TlsError (std::system_error for a socket's).
  Io read(std::span<std::byte> out);
  Io write(std::span<const std::byte> in);
  // What crossed the socket so far, TLS records and handshake included.
  uint64_t raw_bytes_read() const;
  uint64_t raw_bytes_written() const;

 private:
  TlsSession(SSL_CTX* context, int fd);
  // Want::read or Want::write; any other outcome throws TlsError "`what` failed: why".
  Want want_of(int result, const std::string& what);
  SSL* ssl_ = nullptr;
};

}  // namespace quartet::transport
