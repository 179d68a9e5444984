#include "runner/launch_command.h"

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>

#include "runner/certs_command.h"
#include "runner/cluster.h"
#include "runner/launcher.h"
#include "runner/results.h"
#include "runner/spec.h"
#include "runner/token_file.h"
#include "runner/wiring.h"
#include "transport/connection.h"

namespace quartet::runner {
namespace {

using nlohmann::json;

// The spec cut down to `arm`, every rank but rank 0 remote: what rank 0 runs.
std::shared_ptr<const ExperimentSpec> rank0_spec(const ExperimentSpec& spec, const std::string& arm,
                                                 const std::vector<std::string>& roles) {
  json j = spec.json;
  json kept;
  for (const json& a : j.at("arms"))
    if (a.value("name", "") == arm) kept = a;
  kept["remote"] = std::vector<std::string>(roles.begin() + 1, roles.end());
  j["arms"] = json::array({kept});
  return std::make_shared<const ExperimentSpec>(parse_spec(j));
}

bool is_ip_address(const std::string& host) {
  return !host.empty() && (host.find_first_not_of("0123456789.") == std::string::npos || host.find(':') != std::string::npos);
}

}  // namespace

CLI::App* add_launch_command(CLI::App& app, LaunchOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "launch", "Run one rank of a data_parallel, tensor_parallel, context_parallel, expert_parallel or mesh arm, "
                "started "
                "once per rank by srun, mpirun or torchrun "
                "(rank and coordinator from their variables; see docs/cluster.md)");
  cmd->add_option("spec", o.spec_path, "experiment file")->required();
  cmd->add_option("--arm", o.arm,
                  "the data_parallel, tensor_parallel, context_parallel, expert_parallel or mesh arm to run")
      ->required();
  cmd->add_option("--out", o.out, "rank 0: run folder to create (must not exist); default results/<name>-<time>");
  cmd->add_option("--coordinator", o.coordinator,
                  "HOST or HOST:PORT of rank 0's coordinator; default: the first host of SLURM_NODELIST, else "
                  "MASTER_ADDR, port MASTER_PORT or 29500");
  cmd->add_option("--token-file", o.token_file,
                  "a file on a shared filesystem: rank 0 writes the run's token there, the others wait for it "
                  "(default: QUARTET_TOKEN on every rank)");
  cmd->add_option("--work-dir", o.work_dir, "ranks but 0: folder for their checkpoints and weights");
  cmd->add_option("--progress", o.progress, "rank 0: bar, jsonl or none (default)")
      ->check(CLI::IsMember({"bar", "jsonl", "none"}));
  cmd->add_option("--join-timeout", o.join_timeout_s, "ranks but 0: seconds to keep trying to join (default 600)")
      ->check(CLI::PositiveNumber);
  add_tls_options(*cmd, o.tls);
  return cmd;
}

int launch_main(const LaunchOptions& o) {
  const ClusterRank cr = cluster_rank([](const std::string& n) { return std::getenv(n.c_str()); }, o.coordinator);
  const ExperimentSpec spec = load_spec_file(o.spec_path);
  const ArmSpec& arm = spec.arm(o.arm);
  if (arm.regime != "data_parallel" && arm.regime != "tensor_parallel" && arm.regime != "context_parallel" &&
      arm.regime != "expert_parallel" && arm.regime != "mesh")
    throw InputError("--arm " + arm.name + ": its regime is " + arm.regime +
                     "; quartet launch runs data_parallel, tensor_parallel, context_parallel, expert_parallel and "
                     "mesh arms only (one process per rank)");
  const std::vector<std::string> roles = arm.regime_entry().roles(*arm.settings);
  if (static_cast<int>(roles.size()) != cr.world_size)
    throw InputError(cr.world_size_variable + ": " + std::to_string(cr.world_size) + " processes, but arm " +
                     arm.name + " has " + std::to_string(roles.size()) + " ranks (its \"ranks\"); start as many "
                     "processes as the arm has ranks");
  // The role this process runs (rank 0's as a child) picks its GPU by it.
  if (cr.local_rank >= 0) setenv("QUARTET_LOCAL_RANK", std::to_string(cr.local_rank).c_str(), 1);
  const std::string address = cr.host + ":" + std::to_string(cr.port);
  std::cerr << "quartet launch: " << cr.style << " rank " << cr.rank << " of " << cr.world_size << " (local rank "
            << cr.local_rank << "), coordinator " << address;
  if (!cr.port_note.empty()) std::cerr << " (" << cr.port_note << ")";
  for (const std::string& v : cr.ignored) std::cerr << "; also set, not read: " << v;
  std::cerr << "\n";
  if (cr.rank == 0) {
    RunOptions run;
    run.spec = rank0_spec(spec, arm.name, roles);
    run.out = o.out;
    run.progress = o.progress;
    run.tls = o.tls;
    // A host name cannot be listened on: every interface then, the token keeping strangers out.
    run.listen = (is_ip_address(cr.host) ? cr.host : std::string("0.0.0.0")) + ":" + std::to_string(cr.port);
    run.advertise = cr.host;
    const char* token = std::getenv("QUARTET_TOKEN");
    if (o.token_file.empty() || (token != nullptr && *token != '\0')) return run_experiment(run);
    setenv("QUARTET_TOKEN", transport::make_token().c_str(), 1);
    write_token_file(o.token_file, std::getenv("QUARTET_TOKEN"));
    // The other ranks wait for the token file: a rank 0 that fails says so there, and
    // they stop instead of waiting out their join timeout.
    int code = 1;
    std::string why = "it exited with code 1";
    try {
      code = run_experiment(run);
      why = "it exited with code " + std::to_string(code);
    } catch (const std::exception& e) {
      why = e.what();
      write_token_file(o.token_file, "", why);
      throw;
    }
    if (code != 0) write_token_file(o.token_file, "", why);
    return code;
  }
  RoleOptions role;
  role.coordinator = address;
  role.arm = arm.name;
  role.role = roles[static_cast<size_t>(cr.rank)];
  role.work_dir = o.work_dir;
  role.tls = o.tls;
  role.join_within = std::chrono::seconds(o.join_timeout_s);
  const char* token = std::getenv("QUARTET_TOKEN");
  if (token == nullptr || *token == '\0') {
    if (o.token_file.empty())
      throw InputError("QUARTET_TOKEN: not set and no --token-file; allowed: the run's token in QUARTET_TOKEN on "
                       "every rank, or --token-file FILE on a filesystem every rank sees (rank 0 writes it)");
    role.token_file = o.token_file;
  }
  return run_role(role);
}

}  // namespace quartet::runner
