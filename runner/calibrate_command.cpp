#include "runner/calibrate_command.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <thread>
#include <vector>

#include "analysis/plan/cluster.h"
#include "engine/cpu/peak.h"
#include "engine/machine.h"
#include "engine/ops.h"
#include "engine/threads.h"
#include "runner/wiring.h"

namespace quartet::runner {

namespace plan = analysis::plan;
using engine::cpu::best_seconds;

namespace {

struct Sizes {
  int reps;
  long fma_iterations;
  int64_t copy_floats;
  int64_t matmul_rows, matmul_width;
  int64_t conv_batch;
  int64_t attention_batch;
  int64_t large_message;
};

Sizes sizes_for(bool quick) {
  if (quick) return {1, 2'000'000, 1 << 20, 64, 256, 4, 1, 1 << 16};
  return {11, 20'000'000, 1 << 24, 128, 1024, 32, 32, 1 << 22};
}

engine::Tensor filled(const engine::Shape& shape, float v, bool grad = false) {
  engine::Tensor t = engine::Tensor::full(shape, v);
  if (grad) t.set_requires_grad(true);
  return t;
}

// The median of `reps` timed calls of `once` after one untimed call: a sustained rate,
// as a training run sees it on a machine others share (the best would be the quiet
// moments only).
template <typename F>
double median_seconds(int reps, F&& once) {
  once();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    once();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Seconds of one forward and backward of `op`: its output summed to a scalar and
// backward from there, less what that sum and its gradient cost on their own (over a
// tensor of the output's shape), which the op in a model does not pay.
template <typename F>
double train_seconds(int reps, F&& op) {
  const double with_sum = median_seconds(reps, [&] { engine::sum(op()).backward(); });
  const engine::Tensor like = filled(op().shape(), 0.01f, true);
  const double sum_alone = median_seconds(reps, [&] { engine::sum(like).backward(); });
  return std::max(with_sum - sum_alone, with_sum / 2);
}

// FLOPs per second of the products of two layers as the models have them: mlp's first
// (784 -> 256, the data's input: no input gradient) and gpt-mini's MLP (128 -> 512 at
// every position), forward and backward.
double matmul_flops_per_s(const Sizes& s) {
  const int64_t rows = s.matmul_rows;
  // As the models' Linear layers run them (weights out × in), their bias apart.
  const engine::Tensor x1 = filled({rows, 784}, 0.01f), w1 = filled({256, 784}, 0.01f, true);
  const engine::Tensor x2 = filled({s.attention_batch * 128, 128}, 0.01f, true), w2 = filled({512, 128}, 0.01f, true);
  const double t = train_seconds(s.reps, [&] { return engine::linear(x1, w1, engine::Tensor()); }) +
                   train_seconds(s.reps, [&] { return engine::linear(x2, w2, engine::Tensor()); });
  const double flops = 2.0 * 2 * rows * 784 * 256 + 3.0 * 2 * s.attention_batch * 128 * 128 * 512;
  return flops / t;
}

// cnn's two convolutions (1 -> 32 channels on 28x28, the data's input; 32 -> 64 on
// 14x14; 3x3, padding 1), forward and backward.
double conv_flops_per_s(const Sizes& s) {
  const int64_t n = s.conv_batch;
  engine::ConvOptions o;
  o.padding = {1};
  const engine::Tensor x1 = filled({n, 1, 28, 28}, 0.01f), w1 = filled({32, 1, 3, 3}, 0.01f, true),
                       b1 = filled({32}, 0.0f, true);
  const engine::Tensor x2 = filled({n, 32, 14, 14}, 0.01f, true), w2 = filled({64, 32, 3, 3}, 0.01f, true),
                       b2 = filled({64}, 0.0f, true);
  const double t = train_seconds(s.reps, [&] { return engine::conv2d(x1, w1, b1, o); }) +
                   train_seconds(s.reps, [&] { return engine::conv2d(x2, w2, b2, o); });
  const double flops = 2.0 * 2 * 32 * 9 * 28 * 28 * n + 3.0 * 2 * 32 * 64 * 9 * 14 * 14 * n;
  return flops / t;
}

// gpt-mini's attention (width 128, 4 heads) over sequences of T positions, as many
// positions in all as `attention_batch` sequences of 128; the causal pairs' two products.
double attention_flops_per_s(const Sizes& s, int64_t T = 128) {
  const int64_t w = 128, batch = s.attention_batch * 128 / T;
  const engine::Tensor q = filled({batch, T, w}, 0.01f, true), k = filled({batch, T, w}, 0.02f, true),
                       v = filled({batch, T, w}, 0.03f, true);
  const double t = train_seconds(s.reps, [&] { return engine::causal_attention(q, k, v, 4); });
  return 3.0 * 2.0 * 2.0 * w * (T * (T + 1) / 2.0) * static_cast<double>(batch) / t;
}

// Hockney's n½ over positions from attention's rates at L1 and L2 < L1 positions:
// e(L) = E L / (L + h) through both; 0 where the shorter runs no slower.
double half_positions(double l1, double e1, double l2, double e2) {
  const double r = e1 / e2;
  if (r <= 1.0) return 0.0;
  if (l1 - r * l2 <= 0.0) return 1e4;
  return std::min(1e4, l1 * l2 * (r - 1.0) / (l1 - r * l2));
}

// Values in [-1, 1) that vary from element to element (a ReLU's or a max-pool's branches
// as real activations take them).
engine::Tensor varied(const engine::Shape& shape, bool grad = true) {
  engine::Tensor t = engine::Tensor::empty(shape);
  float* d = t.data();
  uint32_t x = 12345;
  for (int64_t i = 0; i < t.numel(); ++i) {
    x = x * 1664525u + 1013904223u;
    d[i] = static_cast<float>(x >> 8) / static_cast<float>(1 << 23) - 1.0f;
  }
  if (grad) t.set_requires_grad(true);
  return t;
}

// The elementwise ops the models run, at their shapes (cnn's first block at the
// calibration's conv batch, gpt-mini's MLP, norms and logits at its attention batch):
// seconds per element, forward and backward, on the threads set.
std::map<std::string, double> elementwise_op_seconds(const Sizes& s) {
  const int64_t n = s.conv_batch, rows = s.attention_batch * 128;
  const engine::Tensor act = varied({n, 32, 28, 28}), wide = varied({rows, 512}), narrow = varied({rows, 128});
  const engine::Tensor gamma = filled({128}, 1.0f, true), beta = filled({128}, 0.0f, true);
  const engine::Tensor logits = varied({rows, 256}), bias = filled({512}, 0.1f, true);
  // The bias's share of a Linear layer: a product of little depth (8), so that the bias
  // pass (added to each of the rows × 512 outputs, summed over the rows backward) is
  // most of it, with and without the bias.
  const engine::Tensor x = varied({rows, 8}), weight = filled({512, 8}, 0.01f, true);
  std::vector<int32_t> targets(static_cast<size_t>(rows));
  for (size_t i = 0; i < targets.size(); ++i) targets[i] = static_cast<int32_t>((i * 37) % 256);
  // A mixture of experts' movement of rows (gpt-moe: top 2 of 4 experts): each token's
  // rows gathered in expert order, each expert's taken out, put back together, and
  // combined by their gates; per element of the k × rows × 128 it moves.
  const int64_t k = 2, experts = 4;
  const engine::Tensor tokens = varied({rows, 128}), gates = filled({rows, k}, 0.5f, true);
  std::vector<int32_t> order, slots(static_cast<size_t>(rows * k));
  std::vector<std::vector<int32_t>> by_expert(experts);
  for (int64_t choice = 0; choice < rows * k; ++choice) by_expert[(choice * 7 + choice / k) % experts].push_back(static_cast<int32_t>(choice));
  for (const auto& list : by_expert)
    for (int32_t choice : list) {
      slots[static_cast<size_t>(choice)] = static_cast<int32_t>(order.size());
      order.push_back(choice / static_cast<int32_t>(k));
    }
  auto dispatch = [&] {
    const engine::Tensor here = engine::gather_rows(tokens, order);
    engine::TensorList outs;
    int32_t at = 0;
    for (const auto& list : by_expert) {
      std::vector<int32_t> mine(list.size());
      for (size_t i = 0; i < mine.size(); ++i) mine[i] = at++;
      outs.push_back(engine::gather_rows(here, mine));
    }
    return engine::combine_rows(engine::concat(outs, 0), gates, slots);
  };
  const double a = static_cast<double>(act.numel()), w = static_cast<double>(wide.numel()),
               m = static_cast<double>(narrow.numel()), l = static_cast<double>(logits.numel());
  return {
      {"relu", train_seconds(s.reps, [&] { return engine::relu(act); }) / a},
      {"max_pool", train_seconds(s.reps, [&] { return engine::max_pool2d(act); }) / a},
      {"gelu", train_seconds(s.reps, [&] { return engine::gelu(wide); }) / w},
      {"layer_norm", train_seconds(s.reps, [&] { return engine::layer_norm(narrow, gamma, beta); }) / m},
      {"cross_entropy", train_seconds(s.reps, [&] { return engine::cross_entropy(logits, targets); }) / l},
      {"moe_dispatch", train_seconds(s.reps, dispatch) / static_cast<double>(rows * k * 128)},
      // A Linear layer's bias: added to each output row, summed over them backward.
      {"bias", std::max(0.0, train_seconds(s.reps, [&] { return engine::linear(x, weight, bias); }) -
                                 train_seconds(s.reps, [&] { return engine::linear(x, weight, engine::Tensor()); })) /
                   w},
  };
}

// Bytes a copy moves (read and written) per second, on every thread.
double copy_bytes_per_s(const Sizes& s, int threads) {
  const size_t n = static_cast<size_t>(s.copy_floats);
  std::vector<float> a(n, 1.0f), b(n, 0.0f);
  const double t = median_seconds(s.reps, [&] {
    std::vector<std::thread> pool;
    const size_t chunk = n / static_cast<size_t>(threads);
    for (int i = 0; i < threads; ++i)
      pool.emplace_back([&, i] { std::memcpy(b.data() + i * chunk, a.data() + i * chunk, chunk * sizeof(float)); });
    for (std::thread& th : pool) th.join();
  });
  return 2.0 * static_cast<double>(n * sizeof(float)) / t;
}

// An elementwise op's bytes (read x, write y) per second.
double elementwise_bytes_per_s(const Sizes& s) {
  const engine::Tensor x = filled({s.copy_floats}, -0.5f);
  const double t = median_seconds(s.reps, [&] { engine::relu(x); });
  return 2.0 * 4.0 * static_cast<double>(s.copy_floats) / t;
}

// α and β from the one-way times of messages of two sizes.
plan::LinkLevel fit(const std::string& name, double small_bytes, double small_s, double large_bytes, double large_s) {
  plan::LinkLevel l;
  l.name = name;
  const double beta = (large_bytes - small_bytes) / std::max(1e-9, large_s - small_s);
  l.bandwidth_bytes_per_s = beta;
  l.latency_s = std::max(0.0, small_s - small_bytes / beta);
  return l;
}

// One-way seconds of a `bytes` message between two threads through shared memory: the
// sender copies into a buffer and raises a flag, the receiver copies out and answers.
double shm_one_way(int64_t bytes, int reps) {
  std::vector<char> src(static_cast<size_t>(bytes), 1), shared(src.size()), dst(src.size());
  std::atomic<int> turn{0};
  const int rounds = 200;
  const double t = best_seconds(reps, [&] {
    std::thread peer([&] {
      for (int r = 0; r < rounds; ++r) {
        while (turn.load(std::memory_order_acquire) != 1) {
        }
        std::memcpy(dst.data(), shared.data(), dst.size());
        turn.store(0, std::memory_order_release);
      }
    });
    for (int r = 0; r < rounds; ++r) {
      std::memcpy(shared.data(), src.data(), src.size());
      turn.store(1, std::memory_order_release);
      while (turn.load(std::memory_order_acquire) != 0) {
      }
    }
    peer.join();
  });
  return t / rounds;
}

void send_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, 0);
    if (k <= 0) throw std::runtime_error("calibrate: loopback send failed");
    p += k, n -= static_cast<size_t>(k);
  }
}
void recv_all(int fd, char* p, size_t n) {
  while (n > 0) {
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k <= 0) throw std::runtime_error("calibrate: loopback receive failed");
    p += k, n -= static_cast<size_t>(k);
  }
}

// One-way seconds of a `bytes` message over TCP on 127.0.0.1: half a ping-pong's round.
double tcp_one_way(int64_t bytes, int reps) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(listener, 1) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (listener >= 0) ::close(listener);
    throw std::runtime_error("calibrate: cannot listen on 127.0.0.1");
  }
  const int client = ::socket(AF_INET, SOCK_STREAM, 0);
  if (::connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(client), ::close(listener);
    throw std::runtime_error("calibrate: cannot connect to 127.0.0.1");
  }
  const int server = ::accept(listener, nullptr, nullptr);
  const int one = 1;
  ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::vector<char> a(static_cast<size_t>(bytes), 1), b(a.size());
  const int rounds = bytes > 4096 ? 20 : 200;
  double t = 0.0;
  try {
    t = best_seconds(reps, [&] {
      std::thread peer([&] {
        for (int r = 0; r < rounds; ++r) recv_all(server, b.data(), b.size()), send_all(server, b.data(), b.size());
      });
      for (int r = 0; r < rounds; ++r) send_all(client, a.data(), a.size()), recv_all(client, a.data(), a.size());
      peer.join();
    });
  } catch (...) {
    ::close(client), ::close(server), ::close(listener);
    throw;
  }
  ::close(client), ::close(server), ::close(listener);
  return t / rounds / 2.0;
}

}  // namespace

CLI::App* add_calibrate_command(CLI::App& app, CalibrateOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "calibrate", "Time this machine (FMA peak, memory, the engine's kernels, shm and loopback links) and write its "
                   "cluster profile (docs/plan.md)");
  cmd->add_option("--out", o.out, "profile to write")->capture_default_str();
  cmd->add_flag("--quick", o.quick, "small sizes, one repetition: a valid file in a second, rough figures");
  return cmd;
}

int calibrate_main(const CalibrateOptions& o) {
  {
    std::ofstream probe(o.out, std::ios::app);
    if (!probe) throw InputError("--out: " + o.out + " cannot be written");
  }
  const Sizes s = sizes_for(o.quick);
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  // Kernels on one thread, as a rank of a core runs them: on a shared machine a parallel
  // region waits for its slowest thread, and a device here is one core.
  engine::set_compute_threads(1);
  plan::ClusterProfile c;
  c.name = "this-machine";
  c.description = "measured by quartet calibrate" + std::string(o.quick ? " --quick (rough)" : "");
  c.nodes = 1;
  c.devices_per_node = cores;
  c.host_cores = cores;
  c.device.name = std::string("core (") + engine::cpu::fma_isa() + ")";
  c.device.kind = "cpu";
  const double peak = engine::cpu::fma_peak_flops(1, s.fma_iterations, s.reps);
  c.device.peak_flops["fp32"] = peak;
  const double bandwidth = copy_bytes_per_s(s, 1);
  c.device.memory_bandwidth_bytes_per_s = bandwidth;
  c.device.memory_bytes = static_cast<double>(engine::physical_memory_bytes()) / cores;
  auto fraction = [](double v) { return std::clamp(v, 1e-4, 4.0); };  // the profile's range
  c.device.efficiency.matmul = fraction(matmul_flops_per_s(s) / peak);
  c.device.efficiency.conv = fraction(conv_flops_per_s(s) / peak);
  // Attention at gpt-mini's 128 positions and in blocks of 16 (ring attention's at cp 4):
  // the rate at any length, from the two.
  const double e128 = attention_flops_per_s(s) / peak, e16 = attention_flops_per_s(s, 16) / peak;
  c.device.efficiency.attention_half_positions = half_positions(128, e128, 16, e16);
  c.device.efficiency.attention = fraction(e128 * (128 + c.device.efficiency.attention_half_positions) / 128);
  c.device.efficiency.elementwise = fraction(elementwise_bytes_per_s(s) / bandwidth);
  const std::map<std::string, double> one_core = elementwise_op_seconds(s);
  // An op too quick to tell from the timing's noise (a bias beside its product) is left
  // out: priced by memory bandwidth.
  for (const auto& [name, seconds] : one_core)
    if (seconds > 0) c.device.elementwise_ops[name].nanoseconds_per_element = seconds * 1e9;
  // What further cores add to each class: the same kernels on every core, as one rank
  // runs them.
  if (cores > 1) {
    engine::set_compute_threads(cores);
    plan::Efficiency& e = c.device.efficiency;
    auto further = [&](double all_cores, double one_core) {
      return std::clamp((all_cores / one_core - 1.0) / (cores - 1), 0.01, 1.0);
    };
    e.further_cores.matmul = further(matmul_flops_per_s(s) / peak, e.matmul);
    e.further_cores.conv = further(conv_flops_per_s(s) / peak, e.conv);
    e.further_cores.attention = further(attention_flops_per_s(s) / peak, e128);
    e.further_cores.elementwise = further(elementwise_bytes_per_s(s) / bandwidth, e.elementwise);
    for (const auto& [name, seconds] : elementwise_op_seconds(s))
      if (c.device.elementwise_ops.count(name) && seconds > 0)
        c.device.elementwise_ops[name].further_cores = further(one_core.at(name), seconds);
    engine::set_compute_threads(1);
  }
  const double small = 64, large = static_cast<double>(s.large_message);
  c.intra = fit("shared memory", small, shm_one_way(64, s.reps), large, shm_one_way(s.large_message, s.reps));
  c.inter = fit("TCP loopback", small, tcp_one_way(64, s.reps), large, tcp_one_way(s.large_message, s.reps));
  // Round-trip the profile through the parser: what is written is what plan reads.
  const nlohmann::json j = plan::cluster_json(plan::parse_cluster(plan::cluster_json(c)));
  std::ofstream out(o.out, std::ios::trunc);
  out << j.dump(2) << "\n";
  if (!out) throw InputError("--out: " + o.out + " cannot be written");
  const plan::Efficiency& e = c.device.efficiency;
  // Lines that fit 80 columns.
  std::cout << std::fixed << std::setprecision(3) << "fp32 peak " << peak / 1e9 << " GFLOP/s a core ("
            << engine::cpu::fma_isa() << "), copy " << bandwidth / 1e9 << " GB/s on one core\n"
            << "efficiency: matmul " << e.matmul << ", conv " << e.conv << ", attention " << e.attention
            << ", elementwise " << e.elementwise << "\n"
            << "attention in blocks of L positions: x L / (L + " << e.attention_half_positions << ")\n"
            << "a further core adds: matmul " << e.further_cores.matmul << ", conv " << e.further_cores.conv
            << ", attention " << e.further_cores.attention << ",\n  elementwise " << e.further_cores.elementwise << "\n"
            << "elementwise ops, ns an element forward and backward (a further core adds):\n";
  for (const auto& [name, op] : c.device.elementwise_ops)
    std::cout << "  " << name << " " << op.nanoseconds_per_element << " (" << op.further_cores << ")\n";
  std::cout << "shm: " << c.intra.latency_s * 1e6 << " us, " << c.intra.bandwidth_bytes_per_s / 1e9 << " GB/s; "
            << "loopback: " << c.inter.latency_s * 1e6 << " us, " << c.inter.bandwidth_bytes_per_s / 1e9 << " GB/s\n"
            << "wrote " << o.out << "\n";
  return 0;
}

}  // namespace quartet::runner
