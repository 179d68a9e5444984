// quartet_transport_helper: the processes that the multirank tests start. The run token
// comes from the environment (QUARTET_TOKEN), as for quartet's roles.
//
//   helper rank --coordinator HOST:PORT --rank R --ranks N [--gloo-host ADDR] [--arm A]
//       joins arm A as rank R, rendezvous through the coordinator, checks every
//       collective (all-to-all included) against exact values, sends one step record, leaves. Exit 0: all right.
//   helper clients --coordinator HOST:PORT --first I --count C --records K --go KEY [--arm A]
//       C connections at once (roles client<I>..), each waits for KEY, sends K records,
//       then waits for the key "release" and leaves.
//   helper coordinator --host ADDR --ranks N [--arm A] [--timeout S]
//       a coordinator on ADDR; prints "port P" and waits until N roles of arm A have left
//       (exit 0) or one vanished or the time is up (exit 1).

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "transport/collectives.h"
#include "transport/coordinator.h"
#include "transport/gloo_collectives.h"
#include "transport/store.h"

using namespace quartet::transport;
using namespace std::chrono_literals;

namespace {

std::map<std::string, std::string> parse_flags(int argc, char** argv) {
  std::map<std::string, std::string> out;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k.rfind("--", 0) != 0) throw std::invalid_argument("expected --flag, got " + k);
    out[k.substr(2)] = argv[i + 1];
  }
  return out;
}

std::string need(const std::map<std::string, std::string>& f, const std::string& k) {
  auto it = f.find(k);
  if (it == f.end()) throw std::invalid_argument("missing --" + k);
  return it->second;
}

std::string get(const std::map<std::string, std::string>& f, const std::string& k, const std::string& dflt) {
  auto it = f.find(k);
  return it == f.end() ? dflt : it->second;
}

void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("check failed: " + what);
}

// Exact integer-valued floats, as in collectives_test.
float value(int rank, size_t i) { return static_cast<float>((rank + 1) * static_cast<int>(i % 7 + 1)); }
float summed(int ranks, size_t i) { return static_cast<float>(ranks * (ranks + 1) / 2 * static_cast<int>(i % 7 + 1)); }

void run_checks(Collectives& c) {
  const int n = c.size(), r = c.rank();
  for (size_t count : {size_t{1}, size_t{1001}, size_t{1} << 20}) {
    std::vector<float> d(count);
    for (size_t i = 0; i < count; ++i) d[i] = value(r, i);
    c.all_reduce(d);
    for (size_t i = 0; i < count; ++i) check(d[i] == summed(n, i), "all_reduce of " + std::to_string(count));
  }
  {
    const size_t k = 3001;
    std::vector<float> d(k * n);
    for (size_t i = 0; i < d.size(); ++i) d[i] = value(r, i);
    c.reduce_scatter(d);
    for (size_t i = 0; i < k; ++i) check(d[r * k + i] == summed(n, r * k + i), "reduce_scatter");
  }
  {
    std::vector<float> in(500, static_cast<float>(r + 1)), out(500 * n);
    c.all_gather(in, out);
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; i < 500; ++i) check(out[q * 500 + i] == static_cast<float>(q + 1), "all_gather");
  }
  {
    std::vector<float> d(10000, static_cast<float>(r));
    c.broadcast(d, n - 1);
    for (float v : d) check(v == static_cast<float>(n - 1), "broadcast");
  }
  {
    std::vector<float> d(1 << 18, static_cast<float>(r + 1));
    Work w = c.all_reduce_async(d, ReduceOp::average);
    w.wait();
    for (float v : d) check(v == static_cast<float>(n + 1) / 2.0f, "async average");
  }
  {
    // Rank q sends (q + p + 1) * 100 floats of value q * n + p to rank p.
    std::vector<int64_t> send, recv;
    std::vector<float> in;
    for (int p = 0; p < n; ++p) {
      send.push_back((r + p + 1) * 100);
      recv.push_back((p + r + 1) * 100);
      in.insert(in.end(), static_cast<size_t>(send.back()), static_cast<float>(r * n + p));
    }
    std::vector<float> out(in.size());
    c.all_to_all(in, send, out, recv);
    size_t at = 0;
    for (int q = 0; q < n; ++q)
      for (int64_t i = 0; i < recv[static_cast<size_t>(q)]; ++i)
        check(out[at++] == static_cast<float>(q * n + r), "all_to_all");
  }
  c.barrier();
}

int rank_main(const std::map<std::string, std::string>& f) {
  const auto [host, port] = parse_host_port(need(f, "coordinator"));
  const int rank = std::stoi(need(f, "rank"));
  const int ranks = std::stoi(need(f, "ranks"));
  const std::string arm = get(f, "arm", "multirank");
  ClientOptions co;
  co.host = host;
  co.port = port;
  co.arm = arm;
  co.role = "rank" + std::to_string(rank);
  co.requested_rank = rank;
  co.timeout = 60s;
  CoordinatorClient client(co);
  CoordinatorStore store(client, arm + "/gloo/", 120s);
  GlooOptions go;
  go.hostname = get(f, "gloo-host", "127.0.0.1");
  go.timeout = 120s;
  auto c = make_gloo_collectives(store, client.rank(), ranks, go);
  run_checks(*c);
  const CollectiveStats s = c->stats();
  client.send_record(R"({"rank": )" + std::to_string(c->rank()) + R"(, "size": )" + std::to_string(c->size()) +
                     R"(, "checks": "ok", "ops": )" + std::to_string(s.total().ops) + R"(, "bytes": )" +
                     std::to_string(s.total().bytes) + "}");
  c.reset();
  client.leave();
  return 0;
}

int clients_main(const std::map<std::string, std::string>& f) {
  const auto [host, port] = parse_host_port(need(f, "coordinator"));
  const int first = std::stoi(need(f, "first"));
  const int count = std::stoi(need(f, "count"));
  const int records = std::stoi(need(f, "records"));
  const std::string go = need(f, "go");
  const std::string arm = get(f, "arm", "clients");
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    threads.emplace_back([&, i] {
      try {
        ClientOptions co;
        co.host = host;
        co.port = port;
        co.arm = arm;
        co.role = "client" + std::to_string(first + i);
        co.timeout = 60s;
        CoordinatorClient client(co);
        client.kv_wait(go, 300s);
        for (int k = 0; k < records; ++k)
          client.send_record(R"({"client": )" + std::to_string(first + i) + R"(, "step": )" + std::to_string(k) +
                             R"(, "loss": 0.125})");
        client.kv_wait("release", 300s);
        client.leave();
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  int failed = 0;
  for (int i = 0; i < count; ++i)
    if (!errors[i].empty()) {
      std::cerr << "client" << first + i << ": " << errors[i] << "\n";
      ++failed;
    }
  return failed == 0 ? 0 : 1;
}

int coordinator_main(const std::map<std::string, std::string>& f) {
  const int ranks = std::stoi(need(f, "ranks"));
  const std::string arm = get(f, "arm", "multirank");
  const auto timeout = std::chrono::seconds(std::stoi(get(f, "timeout", "120")));
  const char* token = std::getenv("QUARTET_TOKEN");
  if (token == nullptr || *token == '\0') throw std::invalid_argument("QUARTET_TOKEN is not set");
  std::string vanished;
  std::mutex m;
  CoordinatorOptions o;
  o.host = need(f, "host");
  o.token = token;
  o.on_record = [](const RoleId& from, std::string_view r) {
    std::cout << "record " << from.name() << " " << r << std::endl;
  };
  o.on_vanished = [&](const RoleId& who, const std::string& why) {
    std::lock_guard lock(m);
    vanished += who.name() + ": " + why + "; ";
  };
  Coordinator c(o);
  c.declare_arm(arm, ranks);
  std::cout << "port " << c.port() << std::endl;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int left = 0;
    for (const auto& s : c.roles())
      if (s.id.arm == arm && s.left) ++left;
    {
      std::lock_guard lock(m);
      if (!vanished.empty()) {
        std::cerr << "vanished: " << vanished << "\n";
        return 1;
      }
    }
    if (left == ranks) return 0;
    if (std::chrono::steady_clock::now() > deadline) {
      std::cerr << "coordinator: " << left << " of " << ranks << " ranks finished in time\n";
      return 1;
    }
    std::this_thread::sleep_for(20ms);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: quartet_transport_helper rank|clients|coordinator --flag value ...\n";
    return 2;
  }
  const std::string mode = argv[1];
  try {
    const auto flags = parse_flags(argc, argv);
    if (mode == "rank") return rank_main(flags);
    if (mode == "clients") return clients_main(flags);
    if (mode == "coordinator") return coordinator_main(flags);
    std::cerr << "unknown mode " << mode << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "helper " << mode << ": " << e.what() << "\n";
    return 1;
  }
}
