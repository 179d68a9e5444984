#pragma once

// Child processes of the quartet binary itself (roles, benchmark ranks): spawned with
// posix_spawn, secrets passed through the environment (never argv, which every user of
// the machine can read), always reaped by the caller.

#include <sys/types.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace quartet::experiments {

// This process's executable (/proc/self/exe).
std::filesystem::path self_executable();

struct SpawnOptions {
  std::vector<std::string> args;              // argv[1..]; argv[0] is "quartet"
  std::map<std::string, std::string> env;     // set or replaced in the inherited environment
  std::filesystem::path log;                  // stdout and stderr appended here; empty: inherited
};

// Starts `exe` with stdin from /dev/null. Throws std::runtime_error when it cannot.
pid_t spawn_process(const std::filesystem::path& exe, const SpawnOptions& options);

// "exit code 3", "killed by signal Killed".
std::string describe_exit(int wait_status);

}  // namespace quartet::experiments
