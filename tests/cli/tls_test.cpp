// `quartet certs` and a run over TLS end to end: real processes (labelled multirank with
// the rest of the binary's tests), across two network namespaces where they can be made.

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/cli/cli_util.h"
#include "tests/transport/multirank/namespaces.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using cli_util::expect_exit2_with;
using cli_util::file_bytes;
using cli_util::quartet;
using cli_util::Result;
using cli_util::start_quartet;
using cli_util::wait_exit;
using cli_util::wait_for_line;

class Tls : public cli_util::FolderTest {
 protected:
  Tls() : FolderTest("tls") {}
};

unsigned mode_of(const fs::path& p) {
  struct stat st {};
  ::stat(p.c_str(), &st);
  return st.st_mode & 0777;
}

TEST_F(Tls, CertsWritesACaAndCertificatesWithPrivateKeys) {
  const fs::path out = dir_ / "certs";
  const Result r = quartet({"certs", "--out", out.string(), "--hosts", "127.0.0.1,192.0.2.1,node1", "--days", "30"},
                           dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* name : {"ca.pem", "server.pem", "client.pem"})
    EXPECT_NE(file_bytes(out / name).find("-----BEGIN CERTIFICATE-----"), std::string::npos) << name;
  for (const char* name : {"ca.key", "server.key", "client.key"}) {
    EXPECT_NE(file_bytes(out / name).find("PRIVATE KEY-----"), std::string::npos) << name;
    EXPECT_EQ(mode_of(out / name), 0600u) << name;
  }
}

TEST_F(Tls, CertsRefusesANonEmptyFolderAndBadDays) {
  std::ofstream(dir_ / "taken") << "x";
  expect_exit2_with(quartet({"certs", "--out", dir_.string()}, dir_), "exists and is not an empty folder");
  expect_exit2_with(quartet({"certs", "--out", (dir_ / "c").string(), "--days", "0"}, dir_),
                    "--days: expected 1 to 3650, got 0");
}

TEST_F(Tls, ARunWithAMissingCertificateFileSaysWhichBeforeStarting) {
  const Result r = quartet({"run", "--resume", (dir_ / "nothing").string(), "--tls-cert", "/nonexistent/server.pem",
                            "--tls-key", "/nonexistent/server.key", "--tls-ca", "/nonexistent/ca.pem"},
                           dir_);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("tls cert /nonexistent/server.pem: cannot read"), std::string::npos) << r.out;
}

// Pipeline stages and a split server with its clients, all over TLS on one host: every
// server a role starts and every connection to it take the run's settings.
TEST_F(Tls, PipelineAndSplitArmsRunOverTlsOnLoopback) {
  const fs::path certs = dir_ / "certs";
  ASSERT_EQ(quartet({"certs", "--out", certs.string()}, dir_).code, 0);
  const json spec = json::parse(R"({
    "name": "tls-loopback",
    "workload": {"name": "synthetic", "model": "cnn", "train_samples": 64, "test_samples": 32},
    "seed": 3,
    "threads": 1,
    "train": {"epochs": 1, "batch": 16, "optimizer": {"lr": 0.05}},
    "arms": [{"name": "gpipe", "regime": "pipeline", "cuts": ["conv2"], "micro_batches": 2, "schedule": "gpipe"},
             {"name": "sl", "regime": "split", "clients": 2, "cut": "conv2"}]
  })");
  std::ofstream(dir_ / "spec.json") << spec.dump(2);
  const fs::path run = dir_ / "run";
  const Result r = quartet({"run", (dir_ / "spec.json").string(), "--out", run.string(), "--progress=none",
                            "--tls-cert", (certs / "server.pem").string(), "--tls-key", (certs / "server.key").string(),
                            "--tls-ca", (certs / "ca.pem").string(), "--tls-client-ca", (certs / "ca.pem").string()},
                           dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* arm : {"gpipe", "sl"})
    EXPECT_EQ(json::parse(file_bytes(run / arm / "summary.json"))["status"], "finished") << arm;
}

// A federated arm over TLS with mutual authentication between two hosts: the launcher,
// the server and pool0 in one network namespace (192.0.2.1), pool1 joining from the other
// (192.0.2.2). A pool without the TLS settings is refused first; the run then finishes.
TEST_F(Tls, FederatedArmRunsOverMutualTlsAcrossTwoHostsInNetworkNamespaces) {
  using quartet::transport::testing::TwoNamespaces;
  TwoNamespaces ns;
  if (const std::string why = ns.create(); !why.empty()) GTEST_SKIP() << why;

  const fs::path certs = dir_ / "certs";
  ASSERT_EQ(quartet({"certs", "--out", certs.string(), "--hosts", "192.0.2.1,192.0.2.2"}, dir_).code, 0);
  const json spec = json::parse(R"({
    "name": "tls-fed",
    "workload": {"name": "synthetic", "model": "mlp", "train_samples": 64, "test_samples": 32},
    "seed": 3,
    "threads": 1,
    "train": {"batch": 16, "optimizer": {"lr": 0.05}},
    "arms": [{"name": "fed", "regime": "federated", "clients": 2, "processes": 2, "rounds": 2,
              "remote": ["pool1"]}]
  })");
  std::ofstream(dir_ / "spec.json") << spec.dump(2);
  const fs::path run = dir_ / "run";
  const std::string cert = (certs / "server.pem").string(), key = (certs / "server.key").string(),
                    ca = (certs / "ca.pem").string();
  const pid_t launcher = start_quartet({"run", (dir_ / "spec.json").string(), "--out", run.string(),
                                        "--progress=none", "--listen", "192.0.2.1", "--tls-cert", cert, "--tls-key",
                                        key, "--tls-ca", ca, "--tls-client-ca", ca},
                                       dir_ / "launcher.log", {}, {"ip", "netns", "exec", ns.a()});
  const std::string address_line = wait_for_line(dir_ / "launcher.log", "--coordinator ", std::chrono::seconds(120));
  ASSERT_FALSE(address_line.empty()) << file_bytes(dir_ / "launcher.log");
  const std::string address = address_line.substr(0, address_line.find(' '));
  std::string token = file_bytes(run / "token");
  token.erase(token.find_last_not_of('\n') + 1);
  const std::vector<std::string> role_args = {"role", "--coordinator", address, "--arm", "fed", "--role", "pool1",
                                              "--work-dir", (dir_ / "remote").string()};

  const pid_t plain = start_quartet(role_args, dir_ / "plain.log", {"QUARTET_TOKEN=" + token, "QUARTET_THREADS=1"},
                                    {"ip", "netns", "exec", ns.b()});
  EXPECT_NE(wait_exit(plain), 0);
  EXPECT_NE(file_bytes(dir_ / "plain.log").find("speaks TLS only"), std::string::npos) << file_bytes(dir_ / "plain.log");

  const pid_t role = start_quartet(role_args, dir_ / "role.log",
                                   {"QUARTET_TOKEN=" + token, "QUARTET_THREADS=1", "QUARTET_TLS_CERT=" + cert,
                                    "QUARTET_TLS_KEY=" + key, "QUARTET_TLS_CA=" + ca},
                                   {"ip", "netns", "exec", ns.b()});
  EXPECT_EQ(wait_exit(role), 0) << file_bytes(dir_ / "role.log");
  ASSERT_EQ(wait_exit(launcher), 0) << file_bytes(dir_ / "launcher.log");
  const json summary = json::parse(file_bytes(run / "fed" / "summary.json"));
  EXPECT_EQ(summary["status"], "finished");
  EXPECT_EQ(summary["steps"], 2);
  std::ifstream in(run / "fed" / "roles" / "server.jsonl");
  int rounds = 0;
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line);
    if (j["type"] != "step") continue;
    ++rounds;
    EXPECT_EQ(j["round"]["completed"], 2) << j.dump();
  }
  EXPECT_EQ(rounds, 2);
}

}  // namespace
