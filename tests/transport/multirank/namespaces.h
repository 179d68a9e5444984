#pragma once

// Two hosts on one machine, for tests: network namespaces joined by a veth pair, with
// addresses from TEST-NET-1 (192.0.2.1 and 192.0.2.2, documentation only) that exist
// inside the test's namespaces alone. Needs root and iproute2; create() says what is
// missing or which step failed, so a test can skip with the reason:
//
//   TwoNamespaces ns;
//   if (const std::string why = ns.create(); !why.empty()) GTEST_SKIP() << why;
//
// The destructor removes everything.

#include <unistd.h>

#include <string>
#include <vector>

#include "tests/transport/multirank/process.h"

namespace quartet::transport::testing {

inline bool have_ip_tool() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"})
    if (access(p, X_OK) == 0) return true;
  return false;
}

class TwoNamespaces {
 public:
  TwoNamespaces() {
    const std::string id = std::to_string(getpid());
    a_ = "qt" + id + "a";
    b_ = "qt" + id + "b";
    veth_a_ = "qtv" + id + "a";  // interface names stay under 15 characters
    veth_b_ = "qtv" + id + "b";
  }
  ~TwoNamespaces() {
    // Deleting a namespace deletes the veth end inside it; a veth never moved is
    // deleted by name.
    run_command({"ip", "link", "del", veth_a_}, /*quiet=*/true);
    run_command({"ip", "netns", "del", a_}, /*quiet=*/true);
    run_command({"ip", "netns", "del", b_}, /*quiet=*/true);
  }
  // Empty when the namespaces are up; otherwise why not.
  std::string create() {
    if (geteuid() != 0) return "needs root to create network namespaces";
    if (!have_ip_tool()) return "the ip tool (iproute2) is missing";
    const std::vector<std::vector<std::string>> steps = {
        {"ip", "netns", "add", a_},
        {"ip", "netns", "add", b_},
        {"ip", "link", "add", veth_a_, "type", "veth", "peer", "name", veth_b_},
        {"ip", "link", "set", veth_a_, "netns", a_},
        {"ip", "link", "set", veth_b_, "netns", b_},
        {"ip", "-n", a_, "addr", "add", "192.0.2.1/24", "dev", veth_a_},
        {"ip", "-n", b_, "addr", "add", "192.0.2.2/24", "dev", veth_b_},
        {"ip", "-n", a_, "link", "set", veth_a_, "up"},
        {"ip", "-n", b_, "link", "set", veth_b_, "up"},
        {"ip", "-n", a_, "link", "set", "lo", "up"},
        {"ip", "-n", b_, "link", "set", "lo", "up"},
    };
    for (const auto& s : steps) {
      if (run_command(s) != 0) {
        std::string cmd;
        for (const auto& w : s) cmd += (cmd.empty() ? "" : " ") + w;
        return "cannot create network namespaces here: `" + cmd + "` failed";
      }
    }
    return "";
  }
  const std::string& a() const { return a_; }
  const std::string& b() const { return b_; }

 private:
  std::string a_, b_, veth_a_, veth_b_;
};

}  // namespace quartet::transport::testing
