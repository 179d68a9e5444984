#pragma once

// The CUDA backend checked op by op against the CPU engine, as ggml's test-backend-ops
// does it: the same random inputs on both devices, forward and every input's gradient
// compared with a stated tolerance, one line per check in the log.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "engine/device.h"
#include "engine/ops.h"
#include "engine/random.h"
#include "engine/tensor.h"
#include "tests/need_gpu.h"

namespace quartet::engine::cuda_test {

inline const Device kGpu = Device::cuda(0);

// Host tensor of `shape` with values uniform in [lo, hi) from `seed`.
inline Tensor random_tensor(const Shape& shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Generator gen(seed);
  Tensor t = Tensor::empty(shape);
  uniform_(t, lo, hi, gen);
  return t;
}

// max |a - b| / (1 + |a|) over the elements: relative for large values, absolute near 0.
inline double max_rel_diff(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_vector(), y = b.to_vector();
  if (x.size() != y.size()) return INFINITY;
  double worst = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = std::abs(static_cast<double>(x[i]) - y[i]) / (1.0 + std::abs(static_cast<double>(x[i])));
    if (std::isnan(d)) return INFINITY;
    worst = std::max(worst, d);
  }
  return worst;
}

// Runs `op` on host copies of `inputs` and on device copies, backpropagates the same
// random output gradient through both, and expects the outputs and the gradients of
// every input to agree within `tolerance` (max_rel_diff). Prints one line:
//   [ op ] name: forward 1.2e-07, grad 0 3.4e-07, grad 1 ...
inline void expect_same_on_gpu(const std::string& name, const std::vector<Tensor>& inputs,
                               const std::function<Tensor(const std::vector<Tensor>&)>& op,
                               double tolerance = 1e-5, bool backward = true) {
  std::vector<Tensor> host, device;
  for (const Tensor& t : inputs) {
    host.push_back(t.clone().set_requires_grad(backward));
    device.push_back(t.to(kGpu).set_requires_grad(backward));
  }
  const Tensor out_host = op(host);
  const Tensor out_device = op(device);
  ASSERT_EQ(out_device.device(), kGpu) << name;
  std::string line = "[ op ] " + name + ": forward ";
  const double forward = max_rel_diff(out_host, out_device);
  line += std::to_string(forward);
  EXPECT_LE(forward, tolerance) << name << " forward";
  if (backward) {
    const Tensor g = random_tensor(out_host.shape(), 977);
    out_host.backward(g);
    out_device.backward(g.to(kGpu));
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!host[i].grad().defined()) continue;
      ASSERT_TRUE(device[i].grad().defined()) << name << " grad " << i;
      const double d = max_rel_diff(host[i].grad(), device[i].grad());
      line += ", grad " + std::to_string(i) + " " + std::to_string(d);
      EXPECT_LE(d, tolerance) << name << " grad " << i;
    }
  }
  std::printf("%s\n", line.c_str());
}

}  // namespace quartet::engine::cuda_test
