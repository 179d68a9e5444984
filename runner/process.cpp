#include "runner/process.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

extern char** environ;

namespace quartet::runner {

std::filesystem::path self_executable() {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw std::runtime_error("cannot find the quartet executable (/proc/self/exe): " + ec.message());
  return p;
}

pid_t spawn_process(const std::filesystem::path& exe, const SpawnOptions& options) {
  std::vector<std::string> args{"quartet"};
  args.insert(args.end(), options.args.begin(), options.args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    const std::string name = eq ? std::string(*e, static_cast<size_t>(eq - *e)) : std::string(*e);
    if (!options.env.count(name)) env.emplace_back(*e);
  }
  for (const auto& [name, value] : options.env) env.push_back(name + "=" + value);
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  int pipe_fds[2] = {-1, -1};
  if (options.output) {
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0)
      throw std::runtime_error(std::string("cannot make a pipe for a child's output: ") + std::strerror(errno));
    // Room for a burst of log lines while the reader is busy: the child rarely waits.
    ::fcntl(pipe_fds[0], F_SETPIPE_SZ, 1 << 20);
    posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
  } else if (!options.log.empty()) {
    posix_spawn_file_actions_addopen(&actions, 1, options.log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
  }
  // Nothing else of ours leaks into the child (listening sockets, connections, files);
  // after the dup2s above, which read from descriptors this closes.
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (options.output) ::close(pipe_fds[1]);
  if (rc != 0) {
    if (options.output) ::close(pipe_fds[0]);
    throw std::runtime_error("cannot start " + exe.string() + ": " + std::strerror(rc));
  }
  if (options.output) *options.output = pipe_fds[0];
  return pid;
}

OutputTee::OutputTee(int fd, std::filesystem::path log) : fd_(fd), log_(std::move(log)) {
  thread_ = std::thread([this] { run(); });
}

OutputTee::~OutputTee() { wait(); }

void OutputTee::wait() {
  if (thread_.joinable()) thread_.join();
}

std::string OutputTee::last_line() const {
  std::lock_guard lock(mutex_);
  return last_;
}

void OutputTee::run() {
  const int log = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (log >= 0) (void)!::write(log, buf, static_cast<size_t>(n));  // a full disk drops it; the tail is kept
    std::lock_guard lock(mutex_);
    partial_.append(buf, static_cast<size_t>(n));
    size_t start = 0, end;
    while ((end = partial_.find('\n', start)) != std::string::npos) {
      if (end > start) last_ = partial_.substr(start, end - start);
      start = end + 1;
    }
    partial_.erase(0, start);
    if (partial_.size() > 4096) partial_.erase(0, partial_.size() - 4096);  // a line without end stays bounded
  }
  {
    std::lock_guard lock(mutex_);
    if (!partial_.empty()) last_ = partial_;
  }
  if (log >= 0) ::close(log);
  ::close(fd_);
}

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + strsignal(WTERMSIG(status));
  return "unknown status";
}

}  // namespace quartet::runner
