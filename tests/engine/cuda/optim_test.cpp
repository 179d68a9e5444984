// The CUDA optimizer steps against the CPU's: the same parameter and gradient stepped by
// engine/optim.h on each device, the parameter and every state tensor compared after the
// first step (momentum buffer initialised) and the second (updated).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/optim.h"
#include "tests/engine/cuda/op_check.h"

namespace quartet::engine::cuda_test {
namespace {

using MakeOptimizer = std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>)>;

// A parameter of `shape` on `device` with a gradient; same values on either device.
Tensor param_on(const Device& device, const Shape& shape, uint64_t seed) {
  Tensor p = random_tensor(shape, seed).to(device);
  p.set_requires_grad(true);
  p.set_grad(random_tensor(shape, seed + 1).to(device));
  return p;
}

void expect_same_steps(const std::string& name, const MakeOptimizer& make) {
  const std::vector<Shape> shapes = {{7}, {33, 65}, {3, 1000, 7}};
  std::vector<Tensor> host, device;
  for (size_t i = 0; i < shapes.size(); ++i) {
    host.push_back(param_on(Device::cpu(), shapes[i], 10 * i));
    device.push_back(param_on(kGpu, shapes[i], 10 * i));
  }
  const std::unique_ptr<Optimizer> on_host = make(host), on_device = make(device);
  for (int step = 1; step <= 2; ++step) {
    on_host->step();
    on_device->step();
    std::string line = "[ op ] " + name + " step " + std::to_string(step) + ":";
    for (size_t i = 0; i < shapes.size(); ++i) {
      const double d = max_rel_diff(host[i], device[i]);
      line += " param " + std::to_string(i) + " " + std::to_string(d);
      EXPECT_LE(d, 1e-6) << name << " step " << step << " param " << i;
    }
    const NamedTensors hs = on_host->state(), ds = on_device->state();
    ASSERT_EQ(hs.size(), ds.size()) << name;
    for (size_t k = 0; k < hs.size(); ++k) {
      ASSERT_EQ(hs[k].first, ds[k].first) << name;
      const double d = max_rel_diff(hs[k].second, ds[k].second);
      line += ", " + hs[k].first + " " + std::to_string(d);
      EXPECT_LE(d, 1e-6) << name << " step " << step << " " << hs[k].first;
    }
    std::printf("%s\n", line.c_str());
  }
}

TEST(CudaOptim, SgdStepsMatch) {
  QUARTET_NEED_GPU(1);
  const std::vector<std::pair<std::string, SgdOptions>> configs = {
      {"sgd", {.lr = 0.1f}},
      {"sgd weight_decay", {.lr = 0.1f, .weight_decay = 0.01f}},
      {"sgd momentum", {.lr = 0.1f, .momentum = 0.9f}},
      {"sgd momentum dampening weight_decay", {.lr = 0.1f, .momentum = 0.9f, .dampening = 0.2f, .weight_decay = 0.01f}},
      {"sgd nesterov", {.lr = 0.1f, .momentum = 0.9f, .nesterov = true}},
      {"sgd nesterov weight_decay", {.lr = 0.05f, .momentum = 0.8f, .nesterov = true, .weight_decay = 0.1f}},
  };
  for (const auto& [name, opt] : configs)
    expect_same_steps(name, [opt](std::vector<Tensor> p) { return std::make_unique<SGD>(std::move(p), opt); });
}

TEST(CudaOptim, AdamStepsMatch) {
  QUARTET_NEED_GPU(1);
  expect_same_steps("adam", [](std::vector<Tensor> p) { return std::make_unique<Adam>(std::move(p), AdamOptions{}); });
  expect_same_steps("adam weight_decay", [](std::vector<Tensor> p) {
    return std::make_unique<Adam>(std::move(p), AdamOptions{.lr = 1e-2f, .weight_decay = 0.1f});
  });
}

TEST(CudaOptim, AdamWStepsMatch) {
  QUARTET_NEED_GPU(1);
  expect_same_steps("adamw", [](std::vector<Tensor> p) { return std::make_unique<AdamW>(std::move(p), AdamWOptions{}); });
  expect_same_steps("adamw strong decay", [](std::vector<Tensor> p) {
    return std::make_unique<AdamW>(std::move(p), AdamWOptions{.lr = 1e-2f, .beta1 = 0.8f, .weight_decay = 0.5f});
  });
}

}  // namespace
}  // namespace quartet::engine::cuda_test
