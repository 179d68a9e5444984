#include "trainers/virtual_clients.h"

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <thread>

#include "transport/coordinator.h"
#include "transport/messages.h"

namespace quartet::trainers {

using namespace std::chrono_literals;

int64_t parse_client_role(const std::string& role, const std::string& prefix) {
  if (!role.starts_with(prefix) || role.size() == prefix.size()) return -1;
  try {
    size_t used = 0;
    const int64_t id = std::stoll(role.substr(prefix.size()), &used);
    return used == role.size() - prefix.size() && id >= 0 ? id : -1;
  } catch (const std::exception&) {
    return -1;
  }
}

int64_t pool_index(const std::string& role, int64_t processes, const std::string& regime) {
  const int64_t index = parse_client_role(role, "pool");
  if (index < 0 || index >= processes)
    throw std::invalid_argument(regime + ": no role \"" + role + "\"; the roles are server and pool0..pool" +
                                std::to_string(processes - 1));
  return index;
}

const SettingsTable<workloads::PartitionSpec>& partition_table() {
  static const SettingsTable<workloads::PartitionSpec> t = [] {
    using P = workloads::PartitionSpec;
    SettingsTable<P> t;
    t.add(&P::kind, "kind",
          "iid, dirichlet (label skew), shards (McMahan et al.) or scanner (feature skew: each client holds whole "
          "scanners of a phantom workload, scanner s on client s mod clients)")
        .allowed(workloads::partition_kinds());
    t.add(&P::alpha, "alpha", "dirichlet: concentration; small is skewed")
        .above(0.0)
        .applies_when("kind", {"dirichlet"});
    t.add(&P::shards_per_client, "shards_per_client", "shards: shards per client")
        .at_least(1)
        .applies_when("kind", {"shards"});
    return t;
  }();
  return t;
}

workloads::Partition client_partition(const workloads::PartitionSpec& spec, int64_t clients, uint64_t seed,
                                      const workloads::Workload& wl) {
  workloads::PartitionSpec p = spec;
  p.clients = clients;
  p.seed = seed;
  return workloads::make_partition(p, wl);
}

std::vector<std::string> server_and_pools(int64_t processes) {
  std::vector<std::string> out{"server"};
  for (int64_t p = 0; p < processes; ++p) out.push_back("pool" + std::to_string(p));
  return out;
}

void check_processes(int64_t processes, int64_t clients, const ArmFacts& facts) {
  const std::string& path = facts.path;
  if (processes > clients)
    throw SettingsError(path + ".processes: expected at most clients (" + std::to_string(clients) + "), got " +
                        std::to_string(processes) + "; a pool process without clients idles");
  if (!facts.limits) return;
  check_limit(path + ".clients", clients, facts.limits->clients, "virtual clients", facts.limits->basis);
  const int64_t remote = static_cast<int64_t>(facts.remote.size());
  check_limit(path + ".processes", processes + 1 - remote, facts.limits->processes,
              "role processes (the server and the pools) on this host", facts.limits->basis);
}

namespace {

// Between rounds or turns a client waits as long as the server needs; the server ends
// the wait with a shutdown frame or by closing.
constexpr auto kIdleWait = std::chrono::hours(24);

std::unique_ptr<transport::Connection> join(const RoleContext& ctx, const ServerKeys& keys,
                                            const std::string& hello_role, const std::string& link,
                                            double join_timeout_s) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::duration<double>(join_timeout_s);
  for (;;) {
    const std::string address = ctx.coordinator->kv_wait(keys.address, std::chrono::minutes(10));
    const std::string token = ctx.coordinator->kv_wait(keys.token, std::chrono::minutes(1));
    try {
      const auto [host, port] = transport::parse_host_port(address);
      std::unique_ptr<transport::Connection> conn =
          transport::Connection::connect(host, port, 30s, ctx.coordinator->options().tls.get());
      conn->set_link(transport::link_profile(link));
      transport::send_message(*conn, transport::MessageType::hello, transport::Hello{token, hello_role}, 30s);
      transport::receive_message<transport::Welcome>(*conn, transport::MessageType::welcome, 60s);
      return conn;
    } catch (const std::exception&) {
      if (std::chrono::steady_clock::now() > give_up) throw;
      std::this_thread::sleep_for(200ms);
    }
  }
}

}  // namespace

void run_virtual_client(const RoleContext& ctx, const std::string& regime, const ServerKeys& keys,
                        const std::string& hello_role, const std::string& link, double join_timeout_s, const std::string& who,
                        const std::function<void(transport::Connection&, const transport::Frame&)>& serve) {
  auto log = [&](const char* what, const char* why) {
    std::fprintf(stderr, "%s %s: %s %s: %s\n", regime.c_str(), ctx.role.c_str(), who.c_str(), what, why);
  };
  std::unique_ptr<transport::Connection> conn;
  try {
    conn = join(ctx, keys, hello_role, link, join_timeout_s);
  } catch (const std::exception& e) {
    log("could not join the server", e.what());
    return;
  }
  try {
    for (;;) {
      const transport::Frame frame = conn->receive(kIdleWait);
      if (frame.type == transport::MessageType::shutdown) return;
      transport::expect_type(frame, transport::MessageType::control, conn->peer());
      try {
        serve(*conn, frame);
      } catch (const transport::ConnectionClosed&) {
        throw;
      } catch (const std::exception& e) {
        // The client's own work failed: tell the server, which leaves this client out.
        transport::send_error_and_close(*conn, who + ": " + e.what(), 5s);
        throw;
      }
    }
  } catch (const transport::ConnectionClosed&) {
    // The server is done (or gone): nothing more to do.
  } catch (const std::exception& e) {
    log("stopped", e.what());
  }
}

}  // namespace quartet::trainers
