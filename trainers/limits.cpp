#include "trainers/limits.h"

#include <sys/resource.h>

#include <algorithm>
#include <thread>

#include "engine/machine.h"
#include "trainers/settings/schema.h"

namespace quartet::trainers {

MachineLimits MachineLimits::of_this_machine() {
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  MachineLimits m;
  m.processes = std::max<int64_t>(16, 8 * cores);
  m.threads = std::max<int64_t>(16, 8 * cores);
  m.clients = std::min<int64_t>(32768, 2048 * cores);
  m.basis = std::to_string(cores) + (cores == 1 ? " core" : " cores");
  rlimit nproc{};
  if (::getrlimit(RLIMIT_NPROC, &nproc) == 0 && nproc.rlim_cur != RLIM_INFINITY) {
    // Leave the rest of the user's processes and threads their room: a quarter of the limit.
    const int64_t room = static_cast<int64_t>(nproc.rlim_cur) / 4;
    m.processes = std::min(m.processes, room);
    m.threads = std::min(m.threads, room);
    m.clients = std::min(m.clients, room / 2);  // a pool thread and a server handler each
    m.basis += ", ulimit -u " + std::to_string(nproc.rlim_cur);
  }
  m.memory = engine::physical_memory_bytes() / 2;
  m.processes = std::max<int64_t>(1, m.processes);
  m.threads = std::max<int64_t>(1, m.threads);
  m.clients = std::max<int64_t>(1, m.clients);
  return m;
}

void check_limit(const std::string& path, int64_t value, int64_t limit, const std::string& what,
                 const std::string& basis) {
  if (value <= limit) return;
  throw SettingsError(path + ": " + std::to_string(value) + " " + what + " exceed this machine's limit of " +
                      std::to_string(limit) + " (" + basis + "); \"override_limits\": true (the arm's, or the "
                      "experiment's) goes past it");
}

}  // namespace quartet::trainers
