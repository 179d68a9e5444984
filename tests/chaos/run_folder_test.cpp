// A run folder has one writer and is made whole or not at all: a second `quartet run
// --resume` of a folder whose run is going is refused naming the first's pid; a run whose
// set-up fails (a bad --init, a --listen address it cannot take) leaves no folder; bad
// input that only the run finds (an --out that cannot be made, a batch larger than the
// data) exits with code 2, and `quartet validate` finds it too; a file the coordinator
// cannot write ends the run failed with the cause; records torn by a power loss are cut
// to their last intact line on resume.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/cli/cli_util.h"

namespace {

namespace fs = std::filesystem;
using cli_util::expect_exit2_with;
using cli_util::file_bytes;
using cli_util::quartet;
using nlohmann::json;

class RunFolder : public quartet::test_util::TempFolderTest {
 protected:
  RunFolder() : TempFolderTest("run_folder") {}

  fs::path write_spec(const json& train, int64_t train_samples = 256) {
    const json spec = {{"name", "one-writer"},
                       {"workload",
                        {{"name", "synthetic"}, {"model", "mlp"}, {"train_samples", train_samples}, {"test_samples", 64}}},
                       {"threads", 1},
                       {"train", train},
                       {"arms", json::array({{{"name", "single"}, {"regime", "single"}}})}};
    const fs::path p = dir_ / "spec.json";
    std::ofstream(p) << spec.dump(2);
    return p;
  }
};

TEST_F(RunFolder, ASecondWriterIsRefusedNamingTheFirst) {
  const fs::path spec = write_spec({{"epochs", 100000}, {"batch", 32}});
  const fs::path run = dir_ / "run";
  const pid_t first = cli_util::start_quartet({"run", spec.string(), "--out", run.string(), "--progress=none"},
                                              dir_ / "first.log");
  // Once the first run trains, its folder is locked.
  ASSERT_FALSE(cli_util::wait_for_line(run / "single" / "roles" / "trainer.jsonl", "\"type\":\"step\"",
                                       std::chrono::seconds(120))
                   .empty())
      << file_bytes(dir_ / "first.log");
  expect_exit2_with(quartet({"run", "--resume", run.string(), "--progress=none"}, dir_),
                    "in use by another quartet run (pid " + std::to_string(first) + ")");
  expect_exit2_with(quartet({"run", spec.string(), "--out", run.string()}, dir_), "exists; a run folder is never");
  kill(first, SIGINT);
  EXPECT_EQ(cli_util::wait_exit_within(first, std::chrono::seconds(120)), 130) << file_bytes(dir_ / "first.log");
  // Its records are its own: one line per step, none written twice.
  int64_t last = 0;
  std::ifstream in(run / "single" / "roles" / "trainer.jsonl");
  for (std::string line; std::getline(in, line);) {
    const int64_t step = json::parse(line)["step"].get<int64_t>();
    EXPECT_EQ(step, last + 1);
    last = step;
  }
}

TEST_F(RunFolder, AFailedSetUpLeavesNoFolder) {
  const fs::path spec = write_spec({{"epochs", 1}, {"batch", 32}});
  std::ofstream(dir_ / "bad.safetensors") << "not weights";
  expect_exit2_with(quartet({"run", spec.string(), "--out", (dir_ / "run").string(), "--init",
                             (dir_ / "bad.safetensors").string()},
                            dir_),
                    "--init");
  EXPECT_FALSE(fs::exists(dir_ / "run"));
  // A folder without the run's files is not resumed, with a message, not a JSON error.
  fs::create_directories(dir_ / "empty");
  expect_exit2_with(quartet({"run", "--resume", (dir_ / "empty").string()}, dir_), "not a run folder (no spec.json");
}

TEST_F(RunFolder, BadInputTheRunFindsExitsWith2) {
  expect_exit2_with(quartet({"run", write_spec({{"epochs", 1}, {"batch", 32}}).string(), "--out",
                             "/proc/quartet-cannot-be-made/run"},
                            dir_),
                    "--out /proc/quartet-cannot-be-made/run: cannot make the run folder");
  expect_exit2_with(quartet({"run", write_spec({{"epochs", 1}, {"batch", 1000}}).string(), "--out",
                             (dir_ / "run").string()},
                            dir_),
                    "spec.arms[0].train.batch: 1000 is larger than the training set (256 samples)");
  // A quadrillion synthetic samples, all made up front, would end in std::bad_alloc.
  expect_exit2_with(quartet({"run", write_spec({{"epochs", 1}, {"batch", 32}}, int64_t{1000000000000000}).string(),
                             "--out", (dir_ / "run").string()},
                            dir_),
                    "spec.workload.train_samples: 788000000000050432 bytes of synthetic samples");
  EXPECT_FALSE(fs::exists(dir_ / "run"));
}

// A port someone else listens on, while this lives.
class BusyPort {
 public:
  BusyPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 1) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      ADD_FAILURE() << "cannot listen on a port of 127.0.0.1";
    port_ = ntohs(a.sin_port);
  }
  ~BusyPort() { ::close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// The coordinator listens before the run folder is made: an address it cannot take exits
// with code 2 and leaves nothing, so the same --out works once the address is right.
TEST_F(RunFolder, AListenAddressThatCannotBeTakenLeavesNoFolder) {
  const fs::path spec = write_spec({{"epochs", 1}, {"batch", 32}});
  const fs::path run = dir_ / "run";
  const BusyPort busy;
  for (const std::string& listen :
       {"127.0.0.1:" + std::to_string(busy.port()), std::string("999.1.1.1"), std::string("127.0.0.1:99999")}) {
    const cli_util::Result r = quartet({"run", spec.string(), "--out", run.string(), "--listen", listen}, dir_);
    expect_exit2_with(r, "--listen");
    EXPECT_FALSE(fs::exists(run)) << listen << ": " << r.out;
  }
  EXPECT_EQ(quartet({"run", spec.string(), "--out", run.string(), "--progress=none"}, dir_).code, 0);
}

// Listening on every interface, the run says how a role on another host joins: this
// host's routable address, never 0.0.0.0, and where the token is.
TEST_F(RunFolder, ListeningBeyondThisHostSaysHowToJoinAndWhereTheTokenIs) {
  const fs::path run = dir_ / "run";
  const cli_util::Result r = quartet({"run", write_spec({{"epochs", 1}, {"batch", 32}}).string(), "--out",
                                      run.string(), "--listen", "0.0.0.0", "--progress=none"},
                                     dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("open to other hosts, which reach it at "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("; a role joins with the run's token, in " + (run / "token").string() + " (readable by you only)"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("reach it at 0.0.0.0"), std::string::npos) << r.out;
  EXPECT_EQ(fs::status(run / "token").permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
}

// What the run refuses before it starts, validate refuses with the same message.
TEST_F(RunFolder, ValidateRefusesWhatTheRunRefuses) {
  expect_exit2_with(quartet({"validate", write_spec({{"epochs", 1}, {"batch", 1000}}).string()}, dir_),
                    "spec.arms[0].train.batch: 1000 is larger than the training set (256 samples)");
  json spec = json::parse(file_bytes(write_spec({{"epochs", 1}, {"batch", 32}})));
  spec["workload"] = {{"name", "fashion-mnist"}, {"model", "mlp"}, {"data_dir", (dir_ / "no-such-data").string()}};
  std::ofstream(dir_ / "fashion.json") << spec.dump();
  const cli_util::Result validate = quartet({"validate", (dir_ / "fashion.json").string()}, dir_);
  const cli_util::Result run = quartet({"run", (dir_ / "fashion.json").string(), "--out", (dir_ / "r").string()}, dir_);
  EXPECT_EQ(validate.code, 2) << validate.out;
  EXPECT_EQ(run.code, 2) << run.out;
  EXPECT_NE(validate.out.find("no-such-data"), std::string::npos) << validate.out;
  EXPECT_EQ(validate.out, run.out);
}

// The coordinator cannot write the second arm's summary (a folder sits where it goes, as a
// full disk would refuse it): that arm fails with the cause, the next arm still runs, and
// run.json says the run failed, naming the file.
TEST_F(RunFolder, ACoordinatorThatCannotWriteEndsTheRunFailedWithTheCause) {
  json spec = json::parse(file_bytes(write_spec({{"epochs", 1}, {"batch", 32}})));
  spec["arms"] = {{{"name", "first"}, {"regime", "single"}},
                  {{"name", "ddp"}, {"regime", "data_parallel"}, {"ranks", 2}},
                  {{"name", "last"}, {"regime", "single"}}};
  std::ofstream(dir_ / "three.json") << spec.dump();
  const fs::path run = dir_ / "run";
  const pid_t pid = cli_util::start_quartet({"run", (dir_ / "three.json").string(), "--out", run.string(),
                                             "--progress=none"},
                                            dir_ / "run.log");
  ASSERT_FALSE(cli_util::wait_for_line(run / "run.json", "running", std::chrono::seconds(60)).empty())
      << file_bytes(dir_ / "run.log");
  fs::create_directories(run / "ddp" / "summary.json" / "in-the-way");
  EXPECT_EQ(cli_util::wait_exit_within(pid, std::chrono::seconds(300)), 1) << file_bytes(dir_ / "run.log");
  const json status = json::parse(file_bytes(run / "run.json"));
  EXPECT_EQ(status["status"], "failed") << status.dump();
  EXPECT_EQ(status["arms"]["first"], "finished") << status.dump();
  EXPECT_EQ(status["arms"]["ddp"], "failed") << status.dump();
  EXPECT_EQ(status["arms"]["last"], "finished") << status.dump();
  EXPECT_NE(file_bytes(dir_ / "run.log").find("ddp: cannot write the arm's summary: "), std::string::npos)
      << file_bytes(dir_ / "run.log");
  EXPECT_NE(file_bytes(run / "summary.md").find("failed"), std::string::npos);
}

// A power loss after a checkpoint: a role's records end early, in blocks of NUL bytes (as
// a file system that lost the last blocks of a file shows them). Resume cuts every record
// file to its last intact line and the arms end as they would have; no line holds a NUL.
TEST_F(RunFolder, RecordsTornByAPowerLossAreCutToTheirLastIntactLine) {
  json spec = json::parse(file_bytes(write_spec({{"epochs", 3}, {"batch", 32}})));
  spec["arms"] = {{{"name", "single"}, {"regime", "single"}},
                  {{"name", "fed"}, {"regime", "federated"}, {"clients", 2}, {"processes", 1}, {"rounds", 3}}};
  std::ofstream(dir_ / "two.json") << spec.dump();
  const fs::path run = dir_ / "run";
  ASSERT_EQ(quartet({"run", (dir_ / "two.json").string(), "--out", run.string(), "--progress=none"}, dir_).code, 0);
  for (const fs::path& records : {run / "single" / "roles" / "trainer.jsonl", run / "fed" / "roles" / "server.jsonl",
                                  run / "fed" / "roles" / "pool0.jsonl"}) {
    std::string bytes = file_bytes(records);
    ASSERT_GT(bytes.size(), 200u) << records;
    bytes.resize(bytes.size() * 3 / 4);  // the end lost...
    bytes += std::string(4096, '\0');    // ...and a block of zeros where it was
    std::ofstream(records, std::ios::binary | std::ios::trunc) << bytes;
  }
  json status = json::parse(file_bytes(run / "run.json"));
  status["status"] = "interrupted";
  status["arms"]["single"] = "interrupted";
  status["arms"]["fed"] = "interrupted";
  std::ofstream(run / "run.json") << status.dump();
  const cli_util::Result resumed = quartet({"run", "--resume", run.string(), "--progress=none"}, dir_);
  EXPECT_EQ(resumed.code, 0) << resumed.out;
  for (const char* arm : {"single", "fed"})
    EXPECT_EQ(json::parse(file_bytes(run / arm / "summary.json"))["status"], "finished") << arm;
  for (const fs::path& records : {run / "single" / "roles" / "trainer.jsonl", run / "fed" / "roles" / "server.jsonl",
                                  run / "fed" / "roles" / "pool0.jsonl"}) {
    const std::string bytes = file_bytes(records);
    EXPECT_EQ(bytes.find('\0'), std::string::npos) << records;
    std::istringstream in(bytes);
    for (std::string line; std::getline(in, line);) EXPECT_TRUE(json::parse(line).is_object()) << records;
  }
}

}  // namespace
