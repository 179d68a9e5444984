#pragma once

// A cluster profile (clusters/*.json, docs/plan.md): the machines a plan is made for.
// Nodes of identical devices, one link within a node and one between nodes, and, for
// cross-device federated learning, a population of clients whose speeds and links are
// distributions. Units in the file are the ones vendors quote (TFLOP/s, GB/s, GiB,
// Gbit/s, µs); the struct holds SI units (FLOP/s, bytes/s, bytes, seconds).

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace quartet::analysis::plan {

// A profile that is wrong: the message names the field ("device.peak_tflops.bf16:
// expected a number > 0, got -1") and what is allowed.
struct ClusterError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// Fractions of the peak (or of the memory bandwidth, for elementwise) a kind of op
// reaches on the device: measured by `quartet calibrate`, fitted, or stated.
struct Efficiency {
  double matmul = 0.5;
  double conv = 0.5;
  double attention = 0.5;
  double elementwise = 0.5;
  // Matrix products below full size: the efficiency of a product whose smaller weight
  // dimension (per device) is d is matmul × d / (d + matmul_half_dim) (Hockney's n½);
  // 0: every product at `matmul`.
  double matmul_half_dim = 0.0;
  // Attention in blocks of few positions: a block of L query positions runs at
  // `attention` × L / (L + attention_half_positions) (ring attention's blocks are the
  // context over 2 cp); 0: every block at `attention`.
  double attention_half_positions = 0.0;
  // cpu: the fraction of one core's rate that each further core of a rank adds, by op
  // class (a rank of k cores runs a class at 1 + (k − 1) × this of one core's rate); 1:
  // linear.
  struct FurtherCores {
    double matmul = 1.0, conv = 1.0, attention = 1.0, elementwise = 1.0;
  } further_cores;
};

// An elementwise op of the engine as `quartet calibrate` timed it: nanoseconds an element,
// forward and backward together, on one core, and the fraction of that core's rate each
// further core of a rank adds.
struct ElementwiseOp {
  double nanoseconds_per_element = 0.0;
  double further_cores = 1.0;
};

// The ops a profile may time (model_shape.h's Layer::kernels name them).
const std::vector<std::string>& elementwise_op_names();

struct DeviceProfile {
  std::string name;
  std::string kind = "gpu";                   // gpu: one rank a device; cpu: a device is a core, ranks share a node's
  std::map<std::string, double> peak_flops;   // FLOP/s by precision: fp32, tf32, bf16, fp16, ...
  double memory_bytes = 0.0;                  // per device (cpu: a core's share of the node's)
  double memory_bandwidth_bytes_per_s = 0.0;  // per device (cpu: a core's share)
  Efficiency efficiency;
  // Measured elementwise ops (cpu profiles from calibrate): a layer whose kernels are all
  // here is priced by them, else by memory bandwidth.
  std::map<std::string, ElementwiseOp> elementwise_ops;

  // FLOP/s at `precision`; ClusterError naming the precisions the profile has.
  double peak(const std::string& precision) const;
};

struct LinkLevel {
  std::string name;
  double bandwidth_bytes_per_s = 0.0;  // one direction, per NIC (inter) or per device (intra)
  double latency_s = 0.0;              // one way, one message
  int nics_per_node = 1;               // inter-node only: a node's links side by side
};

// A value drawn per client: fixed, uniform in [a, b], or lognormal with median a and
// log-standard-deviation b.
struct Distribution {
  std::string kind = "fixed";  // fixed, uniform, lognormal
  double a = 0.0;
  double b = 0.0;
};

// Cross-device federated learning: every client is one device with its own link.
struct Population {
  int64_t clients = 0;
  Distribution flops;             // FLOP/s a client sustains in training
  Distribution down_bytes_per_s;  // server -> client
  Distribution up_bytes_per_s;    // client -> server
  Distribution latency_s;
  double dropout = 0.0;           // the chance a client asked in a round does not answer
};

struct ClusterProfile {
  std::string name;
  std::string description;
  int64_t nodes = 1;
  int64_t devices_per_node = 1;
  int64_t host_cores = 1;  // per node
  DeviceProfile device;
  LinkLevel intra;  // between the devices of one node
  LinkLevel inter;  // between nodes
  std::optional<Population> population;

  int64_t devices() const { return nodes * devices_per_node; }
};

// Validates and converts; ClusterError naming the field (prefixed by `where`, e.g. the
// file's name) for a missing or wrong one, or an unknown field.
ClusterProfile parse_cluster(const nlohmann::json& j, const std::string& where = "cluster");
// The file's JSON in the file's units: parse_cluster(cluster_json(p)) == p.
nlohmann::json cluster_json(const ClusterProfile& profile);
// Reads and parses a file; ClusterError naming the file when unreadable or not JSON.
ClusterProfile load_cluster_file(const std::string& path);

}  // namespace quartet::analysis::plan
