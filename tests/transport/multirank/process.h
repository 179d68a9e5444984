#pragma once

// Child processes for the multirank tests: started with posix_spawn (extra environment,
// optionally stdout through a pipe), waited for with a deadline, and always reaped: a
// ChildProcess that is destroyed while its process runs kills it (SIGKILL) and waits.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace quartet::transport::testing {

class ChildProcess {
 public:
  // argv[0] is the program (a path, or a name looked up in PATH).
  // quiet: stdout and stderr to /dev/null (capture_stdout wins for stdout).
  ChildProcess(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env,
               bool capture_stdout = false, bool quiet = false) {
    std::vector<std::string> args = argv;
    std::vector<char*> cargv;
    for (auto& a : args) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) env.emplace_back(*e);
    for (const auto& e : extra_env) env.push_back(e);
    std::vector<char*> cenv;
    for (auto& e : env) cenv.push_back(e.data());
    cenv.push_back(nullptr);

    int pipe_fds[2] = {-1, -1};
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    if (quiet) {
      posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
      posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
    }
    if (capture_stdout) {
      if (pipe2(pipe_fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
      posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
    }
    const int rc = posix_spawnp(&pid_, cargv[0], &actions, nullptr, cargv.data(), cenv.data());
    posix_spawn_file_actions_destroy(&actions);
    if (capture_stdout) {
      close(pipe_fds[1]);
      stdout_fd_ = pipe_fds[0];
    }
    if (rc != 0) {
      if (stdout_fd_ >= 0) close(stdout_fd_);
      throw std::runtime_error("cannot start " + argv[0] + ": " + std::strerror(rc));
    }
  }

  ~ChildProcess() {
    if (!reaped_) {
      kill(pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
    }
    if (stdout_fd_ >= 0) close(stdout_fd_);
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }

  // Waits up to `timeout`; the exit status, or nullopt if it is still running.
  std::optional<int> wait(std::chrono::milliseconds timeout) {
    if (reaped_) return status_;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const pid_t r = waitpid(pid_, &status_, WNOHANG);
      if (r == pid_) {
        reaped_ = true;
        return status_;
      }
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  // Waits; kills and reaps past the timeout. True when it exited with code 0.
  bool finished_ok(std::chrono::milliseconds timeout) {
    auto s = wait(timeout);
    if (!s) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status_, 0);
      reaped_ = true;
      return false;
    }
    return WIFEXITED(*s) && WEXITSTATUS(*s) == 0;
  }

  // One line of the child's stdout (without the newline); nullopt on timeout or EOF.
  std::optional<std::string> read_line(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (auto nl = buffered_.find('\n'); nl != std::string::npos) {
        std::string line = buffered_.substr(0, nl);
        buffered_.erase(0, nl + 1);
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{stdout_fd_, POLLIN, 0};
      const int r = poll(&p, 1, static_cast<int>(left.count()));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return std::nullopt;
      char buf[4096];
      const ssize_t n = read(stdout_fd_, buf, sizeof buf);
      if (n <= 0) return std::nullopt;
      buffered_.append(buf, static_cast<size_t>(n));
    }
  }

 private:
  pid_t pid_ = -1;
  int status_ = 0;
  bool reaped_ = false;
  int stdout_fd_ = -1;
  std::string buffered_;
};

// Runs a command to completion (its output goes to the test's unless quiet); returns its
// exit code, or -1 when it could not start, was killed, or ran past the timeout (then it
// is killed).
inline int run_command(const std::vector<std::string>& argv, bool quiet = false,
                       std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  try {
    ChildProcess p(argv, {}, false, quiet);
    auto s = p.wait(timeout);
    if (!s) return -1;
    return WIFEXITED(*s) ? WEXITSTATUS(*s) : -1;
  } catch (const std::exception&) {
    return -1;
  }
}

}  // namespace quartet::transport::testing
