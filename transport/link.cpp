#include "transport/link.h"

#include <stdexcept>

namespace quartet::transport {

namespace {

// Bandwidths are one direction's line rate; latencies one way. nvlink and infiniband
// are for the report's projections: a shaped socket on one host cannot reach them.
const std::vector<LinkProfile>& presets() {
  static const std::vector<LinkProfile> kPresets = {
      {"loopback", 0.0, 0.0},
      {"nvlink", 3.6e12, 3e-6},      // NVLink 4 (H100/H200): 450 GB/s per direction
      {"infiniband", 400e9, 2e-6},   // NDR 400 Gbit/s
      {"10gbe", 10e9, 50e-6},
      {"1gbe", 1e9, 100e-6},
      {"wan-100mbit", 100e6, 30e-3},
      {"lte", 20e6, 60e-3},
  };
  return kPresets;
}

}  // namespace

LinkProfile link_profile(const std::string& name) {
  for (const auto& p : presets())
    if (p.name == name) return p;
  std::string known;
  for (const auto& p : presets()) known += (known.empty() ? "" : ", ") + p.name;
  throw std::invalid_argument("unknown link profile \"" + name + "\"; known: " + known);
}

std::vector<std::string> link_profile_names() {
  std::vector<std::string> names;
  for (const auto& p : presets()) names.push_back(p.name);
  return names;
}

}  // namespace quartet::transport
