#pragma once

// Child processes of the quartet binary itself (roles, benchmark ranks): spawned with
// posix_spawn, secrets passed through the environment (never argv, which every user of
// the machine can read), always reaped by the caller.

#include <sys/types.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace quartet::runner {

// This process's executable (/proc/self/exe).
std::filesystem::path self_executable();

struct SpawnOptions {
  std::vector<std::string> args;              // argv[1..]; argv[0] is "quartet"
  std::map<std::string, std::string> env;     // set or replaced in the inherited environment
  std::filesystem::path log;                  // stdout and stderr appended here; empty: inherited
  // Instead of `log`: stdout and stderr into a pipe whose read end spawn_process returns
  // in *output (close-on-exec; the caller owns it), e.g. for an OutputTee.
  int* output = nullptr;
};

// Starts `exe` with stdin from /dev/null. Throws std::runtime_error when it cannot.
pid_t spawn_process(const std::filesystem::path& exe, const SpawnOptions& options);

// A child's output on its way to a log file, its last lines kept in memory: the cause of
// a failure is known even when the log cannot be written (a full disk). Reads on a thread
// of its own until the child's end of the pipe closes; the log is appended to, and a
// write that fails is dropped.
class OutputTee {
 public:
  OutputTee(int fd, std::filesystem::path log);  // takes `fd`
  ~OutputTee();                                   // waits for the end of the output
  OutputTee(const OutputTee&) = delete;
  OutputTee& operator=(const OutputTee&) = delete;
  void wait();                     // until the child's end of the pipe is closed
  std::string last_line() const;   // the last non-empty line, or ""

 private:
  void run();
  int fd_;
  std::filesystem::path log_;
  mutable std::mutex mutex_;
  std::string last_, partial_;
  std::thread thread_;
};

// "exit code 3", "killed by signal Killed".
std::string describe_exit(int wait_status);

}  // namespace quartet::runner
