#include "runner/cluster.h"

#include <charconv>

#include "runner/wiring.h"
#include "transport/coordinator.h"

namespace quartet::runner {
namespace {

const std::string kNodelistForms =
    "allowed: host names separated by commas, each with optional ranges in brackets, e.g. node[01-03,07],login1";

[[noreturn]] void bad_nodelist(const std::string& list, const std::string& why) {
  throw InputError("SLURM_NODELIST: \"" + list + "\" " + why + "; " + kNodelistForms);
}

// The names one bracket's contents stand for: "01-03,07" -> 01 02 03 07 (a range keeps
// its lower bound's zero padding, as Slurm writes them).
std::vector<std::string> expand_ranges(const std::string& list, const std::string& ranges) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= ranges.size()) {
    size_t end = ranges.find(',', start);
    if (end == std::string::npos) end = ranges.size();
    const std::string item = ranges.substr(start, end - start);
    const size_t dash = item.find('-');
    const std::string lo = item.substr(0, dash), hi = dash == std::string::npos ? lo : item.substr(dash + 1);
    auto digits = [](const std::string& s) { return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos; };
    if (!digits(lo) || !digits(hi) || lo.size() > 9 || hi.size() > 9)
      bad_nodelist(list, "has \"" + item + "\" in brackets, not a number or a range N-M");
    const long a = std::stol(lo), b = std::stol(hi);
    if (b < a) bad_nodelist(list, "has the range \"" + item + "\" that runs backwards");
    if (b - a > 100000) bad_nodelist(list, "has the range \"" + item + "\", over 100,000 hosts");
    for (long n = a; n <= b; ++n) {
      std::string s = std::to_string(n);
      if (s.size() < lo.size()) s.insert(0, lo.size() - s.size(), '0');
      out.push_back(s);
    }
    start = end + 1;
  }
  return out;
}

// One host pattern ("rack[1-2]-n[1,3]"): every combination of its brackets' names.
std::vector<std::string> expand_pattern(const std::string& list, const std::string& pattern) {
  std::vector<std::string> out{""};
  size_t at = 0;
  while (at < pattern.size()) {
    const size_t open = pattern.find('[', at);
    const std::string literal = pattern.substr(at, open == std::string::npos ? std::string::npos : open - at);
    if (literal.find(']') != std::string::npos) bad_nodelist(list, "has a ']' without its '['");
    for (std::string& s : out) s += literal;
    if (open == std::string::npos) break;
    const size_t close = pattern.find(']', open);
    if (close == std::string::npos) bad_nodelist(list, "has a '[' without its ']'");
    std::vector<std::string> next;
    for (const std::string& s : out)
      for (const std::string& n : expand_ranges(list, pattern.substr(open + 1, close - open - 1))) next.push_back(s + n);
    out = std::move(next);
    at = close + 1;
  }
  return out;
}

// A variable that must hold a whole number in [min, max]; InputError naming it otherwise.
int int_variable(const EnvironmentLookup& env, const std::string& name, int min, const std::string& allowed,
                 int max = 1 << 30) {
  const char* v = env(name);
  if (v == nullptr || *v == '\0') throw InputError(name + ": not set; " + allowed);
  const std::string s = v;
  int n = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc() || end != s.data() + s.size() || n < min || n > max)
    throw InputError(name + ": \"" + s + "\" is not allowed; " + allowed);
  return n;
}

struct Style {
  const char* name;
  const char* rank;
  const char* size;
  const char* local;
};
constexpr Style kStyles[] = {{"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
                             {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
                             {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"}};

// The coordinator's host and port: --coordinator, else the style's variables.
void find_coordinator(const EnvironmentLookup& env, const std::string& coordinator, ClusterRank& r) {
  if (env("MASTER_PORT") != nullptr)
    r.port = static_cast<uint16_t>(int_variable(env, "MASTER_PORT", 1, "allowed: a TCP port, 1 to 65535", 65535));
  if (!coordinator.empty()) {
    if (coordinator.find(':') == std::string::npos) {
      r.host = coordinator;
    } else {
      try {
        std::tie(r.host, r.port) = transport::parse_host_port(coordinator);
      } catch (const std::invalid_argument& e) {
        throw InputError(std::string("--coordinator: ") + e.what());
      }
    }
    return;
  }
  if (r.style == "slurm") {
    const char* list = env("SLURM_NODELIST");
    if (list == nullptr || *list == '\0')
      throw InputError("SLURM_NODELIST: not set; srun sets it (its first host runs rank 0), or give --coordinator HOST");
    const std::vector<std::string> hosts = expand_nodelist(list);
    r.host = hosts.front();
    return;
  }
  const char* addr = env("MASTER_ADDR");
  if (addr == nullptr || *addr == '\0')
    throw InputError("MASTER_ADDR: not set; " + r.style +
                     " style needs rank 0's host there (torchrun sets it), or give --coordinator HOST[:PORT]");
  r.host = addr;
}

}  // namespace

std::vector<std::string> expand_nodelist(const std::string& list) {
  if (list.empty()) bad_nodelist(list, "is empty");
  std::vector<std::string> hosts;
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    const char c = i < list.size() ? list[i] : ',';
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0 || depth > 1) bad_nodelist(list, "has unbalanced or nested brackets");
    if (c != ',' || depth != 0) continue;
    const std::string pattern = list.substr(start, i - start);
    if (pattern.empty()) bad_nodelist(list, "has an empty host name");
    for (std::string& h : expand_pattern(list, pattern)) hosts.push_back(std::move(h));
    start = i + 1;
  }
  if (depth != 0) bad_nodelist(list, "has a '[' without its ']'");
  return hosts;
}

ClusterRank cluster_rank(const EnvironmentLookup& env, const std::string& coordinator) {
  const Style* style = nullptr;
  for (const Style& s : kStyles)
    if (env(s.rank) != nullptr) {
      style = &s;
      break;
    }
  if (style == nullptr)
    throw InputError("no rank in the environment: SLURM_PROCID (srun), OMPI_COMM_WORLD_RANK (mpirun) and RANK "
                     "(torchrun) are all unset; allowed: start quartet launch with srun, mpirun or torchrun, or set "
                     "RANK, WORLD_SIZE and MASTER_ADDR by hand");
  ClusterRank r;
  r.style = style->name;
  r.world_size_variable = style->size;
  r.world_size = int_variable(env, style->size, 1, "allowed: a whole number, 1 or more");
  r.rank = int_variable(env, style->rank, 0, std::string("allowed: a whole number from 0 to ") + style->size + " - 1");
  if (r.rank >= r.world_size)
    throw InputError(std::string(style->rank) + ": " + std::to_string(r.rank) + " is not below " + style->size + " (" +
                     std::to_string(r.world_size) + "); allowed: 0 to " + std::to_string(r.world_size - 1));
  if (env(style->local) != nullptr)
    r.local_rank = int_variable(env, style->local, 0, "allowed: a whole number, 0 or more");
  find_coordinator(env, coordinator, r);
  return r;
}

}  // namespace quartet::runner
