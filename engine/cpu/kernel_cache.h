#pragma once

// The per-machine table of measured kernel choices, as cuDNN's benchmark mode with
// MIOpen's or oneDNN's persistent cache: the first process on a machine that meets an
// operation of a shape (with its compute threads) times every kernel that can run it,
// keeps the fastest and writes it to a file; every later process, every rank and role,
// reads the same table, so all of them pick the same kernel and regimes stay bit for bit
// equal. One process measures a shape while the others wait for its answer (a lock file).
//
// The file: $QUARTET_KERNEL_CACHE, else ${XDG_CACHE_HOME:-$HOME/.cache}/quartet/
// kernels-<machine>.json, <machine> a hash of what the choice depends on: the CPU's model
// and flags, and this build (compiler, flags, commit). A file of another machine or
// build, or one that does not parse, is set aside with one warning and measured anew.

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace quartet::engine::cpu {

struct KernelChoice {
  std::string op;       // "conv"
  std::string shape;    // "x (2, 16, 32, 32, 32) w (32, 16, 3, 3, 3) stride 1 pad 1 dil 1, 1 thread"
  std::string kernel;   // the chosen kernel's name
  std::string source;   // "cache" (read from the file), "measured" (by this process)
  std::vector<std::pair<std::string, double>> seconds;  // each candidate's time, when measured
};

// The kernel for (op, shape): from the table, else measured now. time(k) runs candidate
// k once on scratch data and returns its seconds; each candidate is timed by fastest_run. Where no file can be kept, or without `time` (nothing
// to measure with), candidates.front() (the fixed rule's kernel), in every process alike.
// requires: candidates not empty, the rule's kernel first.
// ensures: every process that asks for (op, shape) with the same file gets the same name.
std::string cached_kernel(const std::string& op, const std::string& shape, const std::vector<std::string>& candidates,
                          const std::function<double(const std::string&)>& time);

// From now on, a (op, shape) this process meets is measured again and its entry in the
// table replaced, once per process (quartet tune --again: a choice measured on a busy
// machine stays in the table until measured again).
void remeasure_kernels();

// What this process chose so far through the table, one entry per (op, shape), in the
// order first asked.
std::vector<KernelChoice> kernel_choices();

// How a candidate is timed: one untimed run (first-touch of buffers, the thread pool, a
// library's code generation), then the fastest of three, since other work on the machine
// only ever slows a run down. run() returns its seconds.
double fastest_run(const std::function<double()>& run);

// The table's file for this machine and build (see above).
std::string kernel_cache_path();

// Seconds this process has spent choosing kernels so far: measuring the candidates for a
// shape the table lacked, or waiting for another process that measured it. A run's
// training time leaves them out (the first run on a machine pays them once).
double kernel_tuning_seconds();

}  // namespace quartet::engine::cpu
