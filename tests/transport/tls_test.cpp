#include "transport/tls.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "tests/transport/net_helpers.h"
#include "transport/certs.h"
#include "transport/connection.h"
#include "transport/messages.h"
#include "transport/server.h"

namespace quartet::transport {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::bytes_of;
using testing::kLongTimeout;
using Clock = std::chrono::steady_clock;

// A CertificateSet's files in a folder of the test's own.
struct CertFiles {
  CertFiles(const fs::path& dir, const CertificateOptions& options) : dir(dir) {
    fs::create_directories(dir);
    const CertificateSet set = make_certificates(options);
    write("ca.pem", set.ca_cert);
    write("server.pem", set.server_cert);
    write("server.key", set.server_key);
    write("client.pem", set.client_cert);
    write("client.key", set.client_key);
  }
  void write(const std::string& name, const std::string& text) const { std::ofstream(dir / name) << text; }
  std::string path(const std::string& name) const { return (dir / name).string(); }
  // A server's settings; `mutual`: it requires client certificates from this CA.
  std::shared_ptr<const Tls> server(bool mutual = false) const {
    return std::make_shared<const Tls>(
        TlsFiles{path("server.pem"), path("server.key"), path("ca.pem"), mutual ? path("ca.pem") : ""});
  }
  // A client trusting this CA, with the client certificate or without one.
  std::shared_ptr<const Tls> client(bool with_certificate = true) const {
    return std::make_shared<const Tls>(with_certificate ? TlsFiles{path("client.pem"), path("client.key"), path("ca.pem"), ""}
                                                        : TlsFiles{"", "", path("ca.pem"), ""});
  }
  fs::path dir;
};

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("quartet-tls-test-" + std::to_string(getpid()));
    certs_ = std::make_unique<CertFiles>(dir_ / "run", CertificateOptions{});
  }
  void TearDown() override {
    server_.reset();
    fs::remove_all(dir_);
  }

  // An echo server over TLS whose log lines the test reads.
  void start_server(std::shared_ptr<const Tls> tls, Deadline hello_timeout = kLongTimeout) {
    ServerOptions options;
    options.token = token_;
    options.hello_timeout = hello_timeout;
    options.tls = std::move(tls);
    options.refusal_log_interval = std::chrono::milliseconds(1);
    options.log = [this](const std::string& line) {
      std::lock_guard lock(mutex_);
      log_ += line + "\n";
      changed_.notify_all();
    };
    server_ = std::make_unique<Server>(std::move(options), [](Connection& c, const Hello&) {
      for (;;) {
        const Frame frame = c.receive(kLongTimeout);
        c.send(frame.type, frame.payload, kLongTimeout);
      }
    });
  }
  // Waits (generously) until the server's log says `text`; returns the log.
  std::string wait_for_log(const std::string& text) {
    std::unique_lock lock(mutex_);
    changed_.wait_until(lock, Clock::now() + kLongTimeout, [&] { return log_.find(text) != std::string::npos; });
    return log_;
  }
  std::unique_ptr<Connection> connect_and_hello(const Tls* tls) {
    auto c = Connection::connect("127.0.0.1", server_->port(), kLongTimeout, tls);
    send_message(*c, MessageType::hello, Hello{token_, "test", kProtocolVersion}, kLongTimeout);
    return c;
  }
  static void expect_echo(Connection& c) {
    const auto payload = bytes_of("weights, gradients and nothing in clear");
    c.send(MessageType::control, payload, kLongTimeout);
    const Frame back = c.receive(kLongTimeout);
    EXPECT_EQ(back.type, MessageType::control);
    EXPECT_EQ(back.payload, payload);
  }

  fs::path dir_;
  std::unique_ptr<CertFiles> certs_;
  const std::string token_ = make_token();
  std::unique_ptr<Server> server_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::string log_;
};

TEST_F(TlsTest, FramesRoundTripAndTheCountersCountTheRecords) {
  start_server(certs_->server());
  auto c = connect_and_hello(certs_->client().get());
  ASSERT_TRUE(c->is_tls());
  expect_echo(*c);
  const Counters n = c->counters();
  // The handshake (the server's certificate chain) and the records' headers and tags
  // crossed the socket, beyond the frames' own bytes.
  const auto hello = encode_message(Hello{token_, "test", kProtocolVersion});
  const auto frames_out = static_cast<int64_t>(2 * kFrameHeaderBytes + hello.size() + 40);
  EXPECT_GT(n.bytes_sent, frames_out + 200);      // a ClientHello is over 200 bytes
  EXPECT_GT(n.bytes_received, 500);               // the certificate chain alone is
  EXPECT_EQ(n.messages_sent, 2);
  EXPECT_EQ(n.messages_received, 1);
}

TEST_F(TlsTest, AClientTrustingAnotherCaIsRefusedNamingTheVerifyFailure) {
  start_server(certs_->server());
  const CertFiles other(dir_ / "other", CertificateOptions{});
  try {
    connect_and_hello(other.client().get());
    FAIL() << "a server certificate from an untrusted CA was accepted";
  } catch (const TlsError& e) {
    EXPECT_THAT(e.what(), HasSubstr("certificate verify failed"));
    EXPECT_THAT(e.what(), HasSubstr("unable to get local issuer certificate"));
  }
  EXPECT_THAT(wait_for_log("TLS handshake"), HasSubstr("TLS handshake"));
  expect_echo(*connect_and_hello(certs_->client().get()));  // served on
}

TEST_F(TlsTest, AnExpiredServerCertificateIsRefused) {
  CertificateOptions expired;
  expired.days = -1;
  const CertFiles old(dir_ / "expired", expired);
  start_server(old.server());
  try {
    connect_and_hello(old.client().get());
    FAIL() << "an expired server certificate was accepted";
  } catch (const TlsError& e) {
    EXPECT_THAT(e.what(), HasSubstr("certificate has expired"));
  }
}

TEST_F(TlsTest, AServerCertificateForAnotherAddressIsRefused) {
  CertificateOptions elsewhere;
  elsewhere.hosts = {"192.0.2.7"};
  const CertFiles other_host(dir_ / "elsewhere", elsewhere);
  start_server(other_host.server());
  try {
    connect_and_hello(other_host.client().get());
    FAIL() << "a certificate for 192.0.2.7 was accepted for 127.0.0.1";
  } catch (const TlsError& e) {
    EXPECT_THAT(e.what(), HasSubstr("IP address mismatch"));
  }
}

TEST_F(TlsTest, APlaintextClientIsToldAtOnceAndTheServerServesOn) {
  start_server(certs_->server());
  auto plain = connect_and_hello(nullptr);
  try {
    receive_message<Welcome>(*plain, MessageType::welcome, kLongTimeout);
    FAIL() << "a plaintext hello was answered";
  } catch (const RemoteError& e) {
    EXPECT_THAT(e.text(), HasSubstr("speaks TLS only"));
  }
  EXPECT_THAT(wait_for_log("plaintext"), HasSubstr("this server speaks TLS only"));
  expect_echo(*connect_and_hello(certs_->client().get()));
  EXPECT_EQ(server_->stats().refused, 1);
}

TEST_F(TlsTest, AWrongTokenIsToldThroughTls) {
  start_server(certs_->server());
  auto c = Connection::connect("127.0.0.1", server_->port(), kLongTimeout, certs_->client().get());
  send_message(*c, MessageType::hello, Hello{make_token(), "test", kProtocolVersion}, kLongTimeout);
  try {
    receive_message<Welcome>(*c, MessageType::welcome, kLongTimeout);
    FAIL() << "a wrong token was not refused";
  } catch (const RemoteError& e) {
    EXPECT_EQ(e.text(), "wrong token");
  }
}

TEST_F(TlsTest, AClientThatStallsMidHandshakeIsRefusedAtTheHelloDeadline) {
  start_server(certs_->server(), std::chrono::milliseconds(200));
  testing::RawClient stalled(server_->port());
  const std::byte record_start[] = {std::byte{22}, std::byte{3}, std::byte{1}};  // a handshake record, cut short
  stalled.write(record_start);
  EXPECT_TRUE(stalled.wait_until_closed_by_peer());
  EXPECT_THAT(wait_for_log("no hello"), HasSubstr("no hello within"));
  expect_echo(*connect_and_hello(certs_->client().get()));
}

TEST_F(TlsTest, MutualAuthRefusesAClientWithoutACertificate) {
  start_server(certs_->server(/*mutual=*/true));
  try {
    // TLS 1.3 finishes the client's handshake before the server has checked it: the
    // refusal arrives as an alert on the first read.
    auto c = connect_and_hello(certs_->client(/*with_certificate=*/false).get());
    c->receive(kLongTimeout);
    FAIL() << "a client without a certificate was served";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("certificate required"));
  }
  EXPECT_THAT(wait_for_log("TLS handshake"), HasSubstr("peer did not return a certificate"));
  expect_echo(*connect_and_hello(certs_->client().get()));
}

TEST_F(TlsTest, MutualAuthRefusesAClientCertificateFromAnotherCa) {
  start_server(certs_->server(/*mutual=*/true));
  const CertFiles other(dir_ / "other", CertificateOptions{});
  // Trusts the server's CA, but its own certificate comes from another.
  const Tls stranger(TlsFiles{other.path("client.pem"), other.path("client.key"), certs_->path("ca.pem"), ""});
  EXPECT_ANY_THROW({
    auto c = connect_and_hello(&stranger);
    c->receive(kLongTimeout);
  });
  EXPECT_THAT(wait_for_log("TLS handshake"), HasSubstr("certificate verify failed"));
}

TEST_F(TlsTest, AServerThatStallsMidHandshakeCostsATimeout) {
  // Accepts, reads the client hello into its socket buffer, and never answers.
  asio::io_context io;
  asio::ip::tcp::acceptor silent(io, {asio::ip::make_address("127.0.0.1"), 0});
  const uint16_t port = silent.local_endpoint().port();
  EXPECT_THROW(Connection::connect("127.0.0.1", port, std::chrono::milliseconds(300), certs_->client().get()),
               TimeoutError);
}

TEST(TlsSettings, AMissingFileIsNamed) {
  try {
    Tls(TlsFiles{"", "", "/nonexistent/ca.pem", ""});
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("tls ca /nonexistent/ca.pem: cannot read"));
  }
}

TEST(TlsSettings, ACertificateWithoutItsKeyIsRefused) {
  EXPECT_THROW(Tls(TlsFiles{"cert.pem", "", "ca.pem", ""}), std::invalid_argument);
}

TEST(TlsSettings, SomeEnvironmentVariablesWithoutTheRestNameTheMissingOne) {
  ::setenv("QUARTET_TLS_CA", "/x/ca.pem", 1);
  try {
    Tls::from_environment();
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("QUARTET_TLS_CERT: not set"));
  }
  ::unsetenv("QUARTET_TLS_CA");
  EXPECT_EQ(Tls::from_environment(), nullptr);
}

}  // namespace
}  // namespace quartet::transport
