#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "transport/tls.h"

namespace quartet::runner {

struct ExperimentSpec;
struct ArmSpec;

struct RunOptions {
  std::string spec_path;              // the experiment file (not with resume)
  std::shared_ptr<const ExperimentSpec> spec;  // set: run this instead of spec_path's
  std::filesystem::path out;          // empty: results/<name>-<time>; must not exist
  std::string init;                   // initial weights (safetensors); empty: from the seed
  std::filesystem::path resume;       // continue this run folder
  std::string progress = "bar";       // bar, jsonl or none
  std::string listen = "127.0.0.1";   // the coordinator's address: HOST or HOST:PORT
  // The coordinator's host as roles on other hosts reach it, for the command they are
  // told to join with; empty: listen's host, or where that is every interface (0.0.0.0),
  // transport::routable_address().
  std::string advertise;
  transport::TlsFiles tls;            // --tls-*: empty: QUARTET_TLS_*, else plain TCP
};

// `quartet run`: makes the run folder, runs the arms one after another, each as its
// roles' processes, follows their records, and writes each arm's summary and the run's
// summary.md. Returns the exit code: 0 done, 1 an arm failed, 2 bad input (the message
// printed), 3 an arm diverged or ended degraded, 130 interrupted (finished arms' results
// kept, the run marked interrupted).
int run_experiment(const RunOptions& options);

// What `quartet run` checks of a spec before it makes a run folder, so that `quartet
// validate` agrees with it: the workload's data (its folder's contents; phantoms and
// synthetic samples are counted, not made) and every arm's batch against the training
// set. Throws InputError naming what is wrong.
void check_experiment(const ExperimentSpec& spec);

// The compute threads each of an arm's local processes gets: its `threads`, else this
// machine's cores shared among them (run_experiment gives fewer where other work keeps
// cores busy when the arm starts).
int arm_threads(const ArmSpec& arm);

struct RoleOptions {
  std::filesystem::path run_dir;  // a local role: the run folder made by run_experiment
  std::string coordinator;        // a remote role: HOST:PORT of the run's coordinator
  std::filesystem::path work_dir; // a remote role: where its checkpoints and weights go
  std::string arm;
  std::string role;
  bool resume = false;
  transport::TlsFiles tls;        // --tls-*: empty: QUARTET_TLS_*, else plain TCP
  // A remote role: how long to keep trying to join a coordinator that is not up yet, or
  // refuses it; zero: one try.
  std::chrono::seconds join_within{0};
  // A remote role: the run's token is read from this file (waited for, read again on each
  // try) instead of QUARTET_TOKEN.
  std::filesystem::path token_file;
};

// `quartet role`: one role of one arm. A local role (run_dir) reads the spec from the
// run folder and appends its records there; a remote role (coordinator, token in
// QUARTET_TOKEN) gets the spec from the coordinator and sends its records to it.
// QUARTET_LOCAL_RANK, when set (quartet launch), is the role's place on its host.
int run_role(const RoleOptions& options);

}  // namespace quartet::runner
