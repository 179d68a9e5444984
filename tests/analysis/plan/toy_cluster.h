#pragma once

// One node of `devices` GPUs of 1 TFLOP/s at fp32, every op class at half of it, and
// memory so fast that only FLOPs count: a step is its FLOPs over 0.5 TFLOP/s. Links:
// 10 GB/s and 10 µs within a node, 1 GB/s and 50 µs between nodes.

#include "analysis/plan/cluster.h"

namespace quartet::analysis::plan {

inline ClusterProfile compute_bound(int64_t devices = 8, int64_t nodes = 1) {
  ClusterProfile c;
  c.name = "toy";
  c.nodes = nodes;
  c.devices_per_node = devices;
  c.device.name = "toy";
  c.device.peak_flops = {{"fp32", 1e12}};
  c.device.memory_bytes = 1e12;
  c.device.memory_bandwidth_bytes_per_s = 1e18;
  c.device.efficiency = {0.5, 0.5, 0.5, 0.5, 0.0, 0.0, {}};
  c.intra = {"intra", 10e9, 10e-6, 1};
  c.inter = {"inter", 1e9, 50e-6, 1};
  return c;
}

}  // namespace quartet::analysis::plan
