// quartet-bench-train: trains one model for a fixed number of steps and prints one JSON
// line: samples/s, the engine's tracked peak and the RSS peak above the process's
// baseline, and the analytic memory need. bench/torch_train.py is its PyTorch twin and
// follows the same protocol: SGD with momentum 0.9, cross-entropy, a pool of pre-made
// random batches, each step's batch copied out of the pool (as a loader would hand it
// over), `warmup` untimed steps, then `steps` timed ones.

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/cpu/conv_kernel.h"
#include "engine/cpu/simd.h"
#include "engine/device.h"
#include "engine/device_memory.h"
#include "engine/model.h"
#include "engine/nn.h"
#include "engine/ops.h"
#include "engine/optim.h"
#include "engine/random.h"
#include "engine/threads.h"
#include "workloads/models.h"
#include "workloads/onnx/model.h"

namespace {

using namespace quartet;
using engine::Shape;
using engine::Tensor;

// Reads a "Key:   1234 kB" line of /proc/self/status, in KiB.
int64_t proc_status_kb(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key + ":", 0) == 0) return std::stoll(line.substr(key.size() + 1));
  throw std::runtime_error("/proc/self/status has no " + key);
}

// CPU seconds of every thread of this process: with one thread, a figure that other work
// sharing the core disturbs less than wall time.
double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Linux >= 4.0: writing 5 resets VmHWM (the peak RSS) to the current RSS.
void reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  if (!out) throw std::runtime_error("cannot reset the peak RSS through /proc/self/clear_refs");
}

// conv3d 1->16, 16->32 (3^3 kernels, padding 1, ReLU), global average pool, linear 32->2:
// the 3D convolution stack the memory benchmark times, batch 2 at 32^3 or 64^3.
std::shared_ptr<engine::Model> make_conv3d_stack(uint64_t seed) {
  engine::Generator gen(seed);
  engine::ConvOptions pad1;
  pad1.padding = {1};
  auto features = std::make_shared<engine::Sequential>();
  features->emplace<engine::Conv3d>(1, 16, 3, pad1, gen).emplace<engine::ReLU>();
  features->emplace<engine::Conv3d>(16, 32, 3, pad1, gen).emplace<engine::ReLU>();
  auto head = std::make_shared<engine::Sequential>();
  head->emplace<engine::GlobalAvgPool>().emplace<engine::Linear>(32, 2, gen);
  auto m = std::make_shared<engine::Model>();
  m->add_stage("features", features).add_stage("head", head);
  return m;
}

struct Workload {
  std::shared_ptr<engine::Model> model;
  Shape sample;         // (C, *spatial)
  int classes = 0;
  // Floats per sample that backward must keep: each layer's saved input or output
  // counted once, pooling indices at 4 bytes, the loss's probabilities. 0: not worked
  // out (unet3d), and no analytic figure is printed.
  int64_t saved_per_sample = 0;
  // Class labels per sample: 1 for classification, one per voxel for segmentation, one
  // per position for a language model.
  int64_t labels_per_sample = 1;
  bool tokens = false;  // inputs are byte values (whole numbers below `classes`), not N(0, 1)
};

Workload make_workload(const std::string& name, uint64_t seed) {
  if (name == "mlp")  // x, relu(fc1), relu(fc2), probs
    return {workloads::make_model(name, seed), {1, 28, 28}, 10, 784 + 256 + 128 + 10};
  if (name == "lenet5")  // x, relu1, pool1 idx + out, relu2, pool2 idx + out, relu fc1, fc2, probs
    return {workloads::make_model(name, seed), {1, 28, 28}, 10,
            784 + 6 * 28 * 28 + 2 * 6 * 14 * 14 + 16 * 10 * 10 + 2 * 16 * 5 * 5 + 120 + 84 + 10};
  if (name == "cnn")  // x, relu1, pool1 idx + out, relu2, pool2 idx + out, relu fc1, probs
    return {workloads::make_model(name, seed), {1, 28, 28}, 10,
            784 + 32 * 28 * 28 + 2 * 32 * 14 * 14 + 64 * 14 * 14 + 2 * 64 * 7 * 7 + 128 + 10};
  for (int64_t side : {32, 64}) {
    if (name == "conv3d-" + std::to_string(side)) {  // x, relu1, relu2, pooled, probs
      const int64_t v = side * side * side;
      return {make_conv3d_stack(seed), {1, side, side, side}, 2, v + 16 * v + 32 * v + 32 + 2};
    }
  }
  for (int64_t side : {32, 64, 128}) {
    if (name == "unet3d-" + std::to_string(side)) {  // the registered unet3d, per-voxel cross-entropy
      const int64_t v = side * side * side;
      Workload w{workloads::make_model("unet3d", seed), {1, side, side, side}, 3, 0};
      w.labels_per_sample = v;
      return w;
    }
  }
  if (name == "resnet-mini") return {workloads::make_model(name, seed), {1, 28, 28}, 10, 0};
  // torchvision's ResNet-18 on CIFAR-sized images, the twin of bench/onnx_speed.py's import
  if (name == "resnet18") return {workloads::make_resnet18(seed), {3, 32, 32}, 10, 0};
  if (workloads::onnx::is_onnx_model(name)) {  // an imported graph: its input and classes as declared
    const workloads::ModelInfo info = workloads::model_info(name);
    return {workloads::make_model(name, seed), info.input_shape, info.num_classes, 0};
  }
  if (name == "gpt-mini") {  // 128 bytes a sample, a next-byte label per position
    Workload w{workloads::make_model(name, seed), {128}, 256, 0};
    w.labels_per_sample = 128;
    w.tokens = true;
    return w;
  }
  throw std::invalid_argument("unknown model \"" + name +
                              "\"; known: mlp, lenet5, cnn, resnet-mini, resnet18, onnx:PATH, conv3d-32, conv3d-64, unet3d-32, unet3d-64, unet3d-128, "
                              "gpt-mini");
}

struct Options {
  std::string model = "cnn";
  int64_t batch = 64;
  int threads = 1;
  int steps = 50;
  int warmup = 5;
  uint64_t seed = 1;
  std::string device = "cpu";
};

void run(const Options& o) {
  engine::set_compute_threads(o.threads);
  const engine::Device device = engine::Device::parse(o.device);
  if (!engine::device_available(device)) throw std::invalid_argument(engine::device_unavailable_reason(device));
  const bool gpu = !device.is_cpu();
  Workload w = make_workload(o.model, o.seed);
  Shape batch_shape{o.batch};
  for (int64_t s : w.sample) batch_shape.push_back(s);

  // The data pool: plain host memory, outside the engine's accounting.
  constexpr int kPool = 4;
  engine::Generator gen(o.seed + 1);
  const int64_t batch_numel = engine::shape_numel(batch_shape);
  std::vector<std::vector<float>> xs(kPool, std::vector<float>(batch_numel));
  std::vector<std::vector<int32_t>> ys(kPool, std::vector<int32_t>(o.batch * w.labels_per_sample));
  for (int p = 0; p < kPool; ++p) {
    for (float& v : xs[p]) v = w.tokens ? static_cast<float>(gen.below(w.classes)) : gen.normal(0.0f, 1.0f);
    for (int32_t& y : ys[p]) y = static_cast<int32_t>(gen.below(w.classes));
  }
  w.model.reset();  // rebuilt after the baseline, so its memory counts as torch's does

  reset_peak_rss();
  const int64_t base_kb = proc_status_kb("VmRSS");
  engine::reset_memory_peaks();
  const int64_t base_tracked = engine::memory_stats().total_current;

  if (gpu) engine::reset_device_memory_peaks(device);
  const int64_t base_gpu = gpu ? engine::device_memory_stats(device).allocator.allocated : 0;
  w.model = make_workload(o.model, o.seed).model;
  w.model->to(device);
  w.model->train();
  engine::SGD opt(w.model->parameters(), {.lr = 0.01f, .momentum = 0.9f});

  float last_loss = 0.0f;
  auto step = [&](int i) {
    Tensor x = Tensor::empty(batch_shape);
    std::copy(xs[i % kPool].begin(), xs[i % kPool].end(), x.data());
    opt.zero_grad();
    Tensor logits = w.model->forward(x.to(device));
    // A language model's logits are a row per position already: (N * T, vocab).
    Tensor loss = w.labels_per_sample == 1 || w.tokens ? engine::cross_entropy(logits, ys[i % kPool])
                                                       : engine::cross_entropy(logits, ys[i % kPool], {});
    loss.backward();
    opt.step();
    last_loss = loss.item();
  };
  for (int i = 0; i < o.warmup; ++i) step(i);
  const auto t0 = std::chrono::steady_clock::now();
  const double cpu0 = process_cpu_seconds();
  for (int i = 0; i < o.steps; ++i) step(i);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu_seconds = process_cpu_seconds() - cpu0;

  const int64_t peak_kb = proc_status_kb("VmHWM");
  char gpu_json[96] = R"("device": "cpu", "gpu_peak_mb": null)";
  if (gpu)
    std::snprintf(gpu_json, sizeof gpu_json, R"("device": "%s", "gpu_peak_mb": %.3f)", device.str().c_str(),
                  static_cast<double>(engine::device_memory_stats(device).allocator.allocated_peak - base_gpu) /
                      (1024.0 * 1024.0));
  const engine::MemStats stats = engine::memory_stats();
  const int64_t params = workloads::parameter_count(*w.model);
  // Parameters, gradients and momentum: three floats per parameter.
  const int64_t analytic = 4 * (3 * params + w.saved_per_sample * o.batch);
  const double mb = 1024.0 * 1024.0;
  char analytic_json[96] = R"("analytic_mb": null, "tracked_over_analytic": null)";
  if (w.saved_per_sample > 0)
    std::snprintf(analytic_json, sizeof analytic_json, R"("analytic_mb": %.3f, "tracked_over_analytic": %.4f)",
                  analytic / mb, static_cast<double>(stats.total_peak - base_tracked) / analytic);
  auto tag_peak = [&](engine::MemTag t) { return stats.peak[static_cast<int>(t)] / mb; };
  // The kernel each conv shape kept, and whence (the machine's table, or measured).
  std::string measured_kernels;
  for (const engine::cpu::KernelChoice& m : engine::cpu::conv_kernel_choices())
    measured_kernels += (measured_kernels.empty() ? "" : ", ") + std::string("{\"shape\": \"") + m.shape +
                        "\", \"kernel\": \"" + m.kernel + "\", \"source\": \"" + m.source + "\"}";
  std::printf(
      "{\"side\": \"ours\", \"conv_kernel\": \"%s\", \"model\": \"%s\", \"batch\": %lld, \"threads\": %d, \"steps\": %d, "
      "\"seconds\": %.6f, \"samples_per_s\": %.3f, \"samples_per_cpu_s\": %.3f, \"rss_peak_mb\": %.3f, \"tracked_peak_mb\": %.3f, "
      "%s, %s, \"peak_by_tag_mb\": {\"parameters\": %.3f, "
      "\"gradients\": %.3f, \"optimizer_state\": %.3f, \"activations\": %.3f, \"workspace\": %.3f}, "
      "\"loss\": %.6f, \"isa\": \"%s\", \"conv_kernels\": [%s]}\n",
      engine::cpu::conv_kernel_policy().c_str(), o.model.c_str(), static_cast<long long>(o.batch), o.threads,
      o.steps, seconds,
      o.steps * o.batch / seconds, o.steps * o.batch / cpu_seconds, (peak_kb - base_kb) / 1024.0, (stats.total_peak - base_tracked) / mb,
      analytic_json, gpu_json, tag_peak(engine::MemTag::parameters), tag_peak(engine::MemTag::gradients),
      tag_peak(engine::MemTag::optimizer_state), tag_peak(engine::MemTag::activations),
      tag_peak(engine::MemTag::workspace), last_loss, engine::cpu::simd::kBuildIsa, measured_kernels.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Trains one model for a fixed number of steps and prints samples/s and peak memory as JSON"};
  Options o;
  app.add_option("--model", o.model, "mlp, lenet5, cnn, resnet-mini, resnet18 (3x32x32), onnx:PATH (an ONNX file), conv3d-32, conv3d-64, unet3d-32, unet3d-64, unet3d-128 or gpt-mini")->capture_default_str();
  app.add_option("--batch", o.batch, "samples per step")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--threads", o.threads, "compute threads")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--steps", o.steps, "timed steps")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed steps first")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--seed", o.seed, "weights and data seed")->capture_default_str();
  app.add_option("--device", o.device, "cpu, cuda or cuda:N")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    run(o);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "quartet-bench-train: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "quartet-bench-train: %s\n", e.what());
    return 1;
  }
  return 0;
}
