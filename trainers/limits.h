#pragma once

// What this machine can take. The spec refuses an arm that would start more role
// processes, compute threads or virtual clients than these, naming the limit, unless the
// arm sets "override_limits": true. Each regime checks its own counts (Regime::complete).

#include <cstdint>
#include <string>

namespace quartet::trainers {

struct MachineLimits {
  int64_t processes = 0;  // role processes one arm may start on this host
  int64_t threads = 0;    // compute threads per process
  int64_t clients = 0;    // virtual clients of one arm: a thread, a connection and a server handler each
  int64_t memory = 0;     // bytes of data a workload may make or load: half the machine's memory
  std::string basis;      // what they come from, for messages: "2 cores, ulimit -u 96364"

  // From the cores and the process limit (RLIMIT_NPROC, which counts threads too):
  // processes 8 per core (at least 16), threads 8 per core (at least 16), clients 2,048 per
  // core (at most 32,768), each at most what the process limit leaves room for; memory
  // half of the physical memory.
  static MachineLimits of_this_machine();
};

// Throws SettingsError at `path` when `value` exceeds `limit`: "1000 rank processes exceed
// this machine's limit of 16 (2 cores, ulimit -u 96364); ...".
void check_limit(const std::string& path, int64_t value, int64_t limit, const std::string& what,
                 const std::string& basis);

}  // namespace quartet::trainers
