#pragma once

// Emulated links for Asio traffic: every frame a shaped connection sends waits its
// serialisation time (bytes / bandwidth) after the previous frame and then the link's
// one-way latency, so traffic is never faster than the link.

#include <optional>
#include <string>
#include <vector>

namespace quartet::transport {

struct LinkProfile {
  std::string name;
  double bandwidth_bits_per_s = 0.0;  // 0: unlimited
  double latency_s = 0.0;             // one way
};

// Presets: loopback (unshaped), 10gbe (10 Gbit/s, 50 us), 1gbe (1 Gbit/s, 100 us),
// wan-100mbit (100 Mbit/s, 30 ms), lte (20 Mbit/s, 60 ms); also the report-only
// profiles nvlink and infiniband. Throws std::invalid_argument listing them.
LinkProfile link_profile(const std::string& name);
std::vector<std::string> link_profile_names();

}  // namespace quartet::transport
