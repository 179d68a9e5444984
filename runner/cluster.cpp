#include "runner/cluster.h"

#include <algorithm>
#include <charconv>
#include <cstdint>

#include "runner/wiring.h"
#include "transport/coordinator.h"

namespace quartet::runner {
namespace {

const std::string kNodelistForms =
    "allowed: host names separated by commas, each with optional ranges in brackets, e.g. node[01-03,07],login1";

[[noreturn]] void bad_nodelist(const std::string& list, const std::string& why) {
  throw InputError("SLURM_NODELIST: \"" + list + "\" " + why + "; " + kNodelistForms);
}

// Slurm job sizes are far below this; a list that stands for more is refused.
constexpr int64_t kMaxNodelistHosts = 100000;

// One item of a bracket: the numbers lo..hi, written with at least `width` digits (a
// range keeps its lower bound's zero padding, as Slurm writes them).
struct Range {
  long lo, hi;
  size_t width;
  std::string name(long n) const {
    std::string s = std::to_string(n);
    if (s.size() < width) s.insert(0, width - s.size(), '0');
    return s;
  }
};

// A bracket's contents, "01-03,07" -> {01..03, 07..07}.
std::vector<Range> parse_ranges(const std::string& list, const std::string& ranges) {
  std::vector<Range> out;
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
    out.push_back({a, b, lo.size()});
    start = end + 1;
  }
  return out;
}

// One host pattern ("rack[1-2]-n[1,3]"): its literal parts and brackets, in order.
struct Pattern {
  std::vector<std::string> literals;        // one more than brackets
  std::vector<std::vector<Range>> brackets;

  int64_t hosts() const {
    int64_t n = 1;
    for (const auto& b : brackets) {
      int64_t in = 0;
      for (const Range& r : b) in = std::min(in + (r.hi - r.lo + 1), kMaxNodelistHosts + 1);
      n = std::min(n * in, kMaxNodelistHosts + 1);  // in <= 10^9, so the product does not overflow
    }
    return n;
  }
  std::string first() const {
    std::string s = literals[0];
    for (size_t i = 0; i < brackets.size(); ++i) s += brackets[i][0].name(brackets[i][0].lo) + literals[i + 1];
    return s;
  }
  // Every combination of its brackets' names, first bracket slowest.
  void expand(std::vector<std::string>& out) const {
    std::vector<std::string> names{literals[0]};
    for (size_t i = 0; i < brackets.size(); ++i) {
      std::vector<std::string> next;
      for (const std::string& s : names)
        for (const Range& r : brackets[i])
          for (long n = r.lo; n <= r.hi; ++n) next.push_back(s + r.name(n) + literals[i + 1]);
      names = std::move(next);
    }
    out.insert(out.end(), names.begin(), names.end());
  }
};

Pattern parse_pattern(const std::string& list, const std::string& pattern) {
  Pattern p;
  size_t at = 0;
  for (;;) {
    const size_t open = pattern.find('[', at);
    const std::string literal = pattern.substr(at, open == std::string::npos ? std::string::npos : open - at);
    if (literal.find(']') != std::string::npos) bad_nodelist(list, "has a ']' without its '['");
    p.literals.push_back(literal);
    if (open == std::string::npos) return p;
    const size_t close = pattern.find(']', open);
    if (close == std::string::npos) bad_nodelist(list, "has a '[' without its ']'");
    p.brackets.push_back(parse_ranges(list, pattern.substr(open + 1, close - open - 1)));
    at = close + 1;
  }
}

// The list's patterns, checked; InputError when it is malformed or stands for more than
// kMaxNodelistHosts hosts.
std::vector<Pattern> parse_nodelist(const std::string& list) {
  if (list.empty()) bad_nodelist(list, "is empty");
  std::vector<Pattern> patterns;
  int64_t hosts = 0;
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
    patterns.push_back(parse_pattern(list, pattern));
    hosts += patterns.back().hosts();
    if (hosts > kMaxNodelistHosts)
      bad_nodelist(list, "stands for more than " + std::to_string(kMaxNodelistHosts) + " hosts");
    start = i + 1;
  }
  if (depth != 0) bad_nodelist(list, "has a '[' without its ']'");
  return patterns;
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
// Innermost launcher first: torchrun and mpirun run inside Slurm jobs (their processes
// inherit the job's SLURM_* variables), never the other way round.
constexpr Style kStyles[] = {{"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
                             {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
                             {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"}};

// The coordinator's host and port: --coordinator, else the style's variables.
void find_coordinator(const EnvironmentLookup& env, const std::string& coordinator, ClusterRank& r) {
  if (env("MASTER_PORT") != nullptr)
    r.port = static_cast<uint16_t>(int_variable(env, "MASTER_PORT", 1, "allowed: a TCP port, 1 to 65535", 65535));
  // torchrun's agent serves its own store on MASTER_PORT (its workers see
  // TORCHELASTIC_USE_AGENT_STORE=True): the coordinator takes the port after it.
  const char* agent_store = env("TORCHELASTIC_USE_AGENT_STORE");
  if (r.style == "torchrun" && agent_store != nullptr && std::string(agent_store) == "True") {
    if (r.port == 65535)
      throw InputError("MASTER_PORT: 65535 leaves no port after torchrun's store for the coordinator; allowed: "
                       "below 65535, or --coordinator HOST:PORT");
    r.port = static_cast<uint16_t>(r.port + 1);
    r.port_note = "MASTER_PORT + 1: torchrun's agent listens on MASTER_PORT";
  }
  if (!coordinator.empty()) {
    if (coordinator.find(':') == std::string::npos) {
      r.host = coordinator;
    } else {
      try {
        std::tie(r.host, r.port) = transport::parse_host_port(coordinator);
      } catch (const std::invalid_argument& e) {
        throw InputError(std::string("--coordinator: ") + e.what());
      }
      r.port_note.clear();
    }
    return;
  }
  if (const char* addr = env("MASTER_ADDR"); r.style != "slurm" && addr != nullptr && *addr != '\0') {
    r.host = addr;
    return;
  }
  // Slurm names rank 0's host first in its node list; mpirun inside a Slurm job places
  // rank 0 there too (by slot, its default).
  const char* list = env("SLURM_NODELIST");
  if (r.style != "torchrun" && list != nullptr && *list != '\0') {
    r.host = first_nodelist_host(list);
    return;
  }
  if (r.style == "slurm")
    throw InputError("SLURM_NODELIST: not set; srun sets it (its first host runs rank 0), or give --coordinator HOST");
  throw InputError("MASTER_ADDR: not set; " + r.style +
                   " style needs rank 0's host there (torchrun sets it), or give --coordinator HOST[:PORT]");
}

}  // namespace

std::vector<std::string> expand_nodelist(const std::string& list) {
  std::vector<std::string> hosts;
  for (const Pattern& p : parse_nodelist(list)) p.expand(hosts);
  return hosts;
}

std::string first_nodelist_host(const std::string& list) { return parse_nodelist(list).front().first(); }

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
  for (const Style& s : kStyles)
    if (&s != style && env(s.rank) != nullptr) r.ignored.push_back(std::string(s.rank) + " (" + s.name + ")");
  find_coordinator(env, coordinator, r);
  return r;
}

}  // namespace quartet::runner
