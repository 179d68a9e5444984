#pragma once

// Helpers for the end-to-end tests of the `quartet` binary: run it (in the foreground or
// the background, optionally behind a prefix such as `ip netns exec NS`), wait for it,
// read what it wrote.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/temp_folder.h"

#ifndef QUARTET_BINARY
#error "QUARTET_BINARY must name the quartet binary"
#endif

namespace cli_util {

namespace fs = std::filesystem;
using nlohmann::json;

struct Result {
  int code = -1;
  std::string out;  // stdout and stderr together
};

// Runs `quartet args...` with stdout+stderr captured to a file; waits for it.
inline Result quartet(const std::vector<std::string>& args, const fs::path& dir) {
  const fs::path log = dir / ("out-" + std::to_string(::getpid()) + ".txt");
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<std::string> all{QUARTET_BINARY};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(QUARTET_BINARY, argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  std::ifstream in(log);
  std::stringstream s;
  s << in.rdbuf();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), s.str()};
}

// Bad input: exit code 2, and the output says `fragment`.
inline void expect_exit2_with(const Result& r, const std::string& fragment) {
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find(fragment), std::string::npos) << "output: " << r.out << "\nexpected: " << fragment;
}

inline std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Starts `quartet args...` in the background with output to `log` and extra environment;
// behind `prefix` when given (e.g. ip netns exec NS).
inline pid_t start_quartet(const std::vector<std::string>& args, const fs::path& log,
                    const std::vector<std::string>& env = {}, const std::vector<std::string>& prefix = {}) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
    std::vector<std::string> all = prefix;
    all.push_back(QUARTET_BINARY);
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

inline int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// wait_exit(), but a process still running after `limit` is killed (with its process
// group when it leads one) and -1 is returned: a hang fails the test instead of the run.
inline int wait_exit_within(pid_t pid, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Waits for `pattern` in the file and returns the rest of that line after it.
inline std::string wait_for_line(const fs::path& file, const std::string& pattern, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    std::istringstream lines(file_bytes(file));
    std::string line;
    while (std::getline(lines, line))
      if (auto at = line.find(pattern); at != std::string::npos) return line.substr(at + pattern.size());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return "";
}

// Every float of a safetensors file in file order (F32 tensors only), read by hand: an
// 8-byte little-endian header size, the JSON header, then the data.
inline std::vector<float> safetensors_floats(const fs::path& p) {
  const std::string bytes = file_bytes(p);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  std::vector<float> out((bytes.size() - 8 - n) / 4);
  std::memcpy(out.data(), bytes.data() + 8 + n, out.size() * 4);
  return out;
}

// The largest elementwise difference of two safetensors files' floats; -1 when their
// counts differ.
inline double max_abs_diff(const fs::path& a, const fs::path& b) {
  const std::vector<float> x = safetensors_floats(a), y = safetensors_floats(b);
  if (x.size() != y.size()) return -1.0;
  double worst = 0.0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(double(x[i]) - y[i]));
  return worst;
}

// The pid of a running `quartet role` process of `run` with role `role`, or -1.
inline pid_t find_role_process(const fs::path& run, const std::string& role) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = file_bytes(entry.path() / "cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(" role ") != std::string::npos && cmdline.find(run.string()) != std::string::npos &&
        cmdline.find("--role " + role + " ") != std::string::npos)
      return static_cast<pid_t>(std::stol(name));
  }
  return -1;
}

// The records of a JSON-lines file whose "type" is `type` (every record when empty).
inline std::vector<json> records_of(const fs::path& file, const std::string& type = "") {
  std::vector<json> out;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);)
    if (json r = json::parse(line); type.empty() || r.value("type", "") == type) out.push_back(r);
  return out;
}

// A test with its own empty folder dir_ (tests/temp_folder.h).
class FolderTest : public quartet::test_util::TempFolderTest {
 protected:
  using TempFolderTest::TempFolderTest;
};

// Starts `quartet run spec --out run` (output to `log`), waits until the arm's server
// has recorded a step, then kills `role` (SIGKILL). Returns the launcher's pid to wait
// for, or -1 (the run then stopped and reaped) when the server recorded nothing within 2
// minutes or the role was not found.
inline pid_t run_and_kill_role(const fs::path& spec, const fs::path& run, const std::string& arm,
                               const std::string& role, const fs::path& log) {
  const pid_t launcher = start_quartet({"run", spec.string(), "--out", run.string(), "--progress=none"}, log);
  const bool recorded =
      !wait_for_line(run / arm / "roles" / "server.jsonl", "\"type\":\"step\"", std::chrono::seconds(120)).empty();
  const pid_t victim = recorded ? find_role_process(run, role) : -1;
  if (victim <= 0) {  // the run is stopped and reaped: no child outlives the test
    kill(launcher, SIGINT);
    wait_exit(launcher);
    return -1;
  }
  kill(victim, SIGKILL);
  return launcher;
}

}  // namespace cli_util
