#include "engine/cpu/conv_kernel.h"

#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>

#include "engine/cpu/dnnl_conv.h"
#include "engine/cpu/winograd.h"
#include "engine/threads.h"

namespace quartet::engine::cpu {
namespace {

struct Measured {
  std::mutex mutex;
  std::map<std::string, ConvKernel> chosen;
  std::vector<MeasuredConv> log;
};

Measured& measured() {
  static Measured m;
  return m;
}

std::string dims(const std::vector<int64_t>& v, const char* sep = ", ") {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + std::to_string(v[i]);
  return s;
}

std::string shape_key(const Tensor& x, const Tensor& weight, const ConvOptions& opt) {
  const int threads = compute_threads();
  return "x (" + dims(x.shape()) + ") w (" + dims(weight.shape()) + ") stride " + dims(opt.stride, "x") + " pad " +
         dims(opt.padding, "x") + " dil " + dims(opt.dilation, "x") + ", " + std::to_string(threads) +
         (threads == 1 ? " thread" : " threads");
}

ConvKernel measure(const Tensor& x, const Tensor& weight, const ConvOptions& opt,
                   const std::function<void(ConvKernel)>& run_forward) {
  MeasuredConv entry{shape_key(x, weight, opt), "", {}};
  Measured& m = measured();
  {
    std::lock_guard lock(m.mutex);
    if (auto it = m.chosen.find(entry.shape); it != m.chosen.end()) return it->second;
  }
  // A backward pass of a shape whose forward never ran here: the fixed rule.
  if (!run_forward) return winograd_applies(x, weight, opt) ? ConvKernel::winograd : ConvKernel::im2col;
  ConvKernel best = ConvKernel::im2col;
  double best_seconds = 0.0;
  for (ConvKernel k : {ConvKernel::im2col, ConvKernel::winograd, ConvKernel::onednn}) {
    if (!conv_kernel_supports(k, x, weight, opt)) continue;
    run_forward(k);  // warm-up: first-touch of buffers, the thread pool, caches
    double fastest = 0.0;
    for (int run = 0; run < 2; ++run) {
      const auto t0 = std::chrono::steady_clock::now();
      run_forward(k);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (run == 0 || s < fastest) fastest = s;
    }
    entry.seconds.emplace_back(conv_kernel_name(k), fastest);
    if (entry.seconds.size() == 1 || fastest < best_seconds) best = k, best_seconds = fastest;
  }
  entry.kernel = conv_kernel_name(best);
  std::lock_guard lock(m.mutex);
  // Another thread may have measured the same shape meanwhile: the first choice stays.
  const auto [it, first] = m.chosen.emplace(entry.shape, best);
  if (first) m.log.push_back(std::move(entry));
  return it->second;
}

}  // namespace

const char* conv_kernel_name(ConvKernel k) {
  switch (k) {
    case ConvKernel::im2col: return "im2col";
    case ConvKernel::winograd: return "winograd";
    case ConvKernel::onednn: return "onednn";
  }
  return "unknown";
}

std::string conv_kernel_policy() {
  const char* env = std::getenv("QUARTET_CONV_KERNEL");
  const std::string p = env && *env ? env : "auto";
  if (p != "auto" && p != "measure" && p != "im2col" && p != "winograd" && p != "onednn")
    throw std::invalid_argument("QUARTET_CONV_KERNEL: expected auto, measure, im2col, winograd or onednn, got \"" +
                                p + "\"");
  return p;
}

bool conv_kernel_supports(ConvKernel k, const Tensor& x, const Tensor& weight, const ConvOptions& opt) {
  switch (k) {
    case ConvKernel::im2col: return true;
    case ConvKernel::winograd: return winograd_supports(x, weight, opt);
    case ConvKernel::onednn: return dnnl_available();
  }
  return false;
}

ConvKernel conv_kernel_for(const Tensor& x, const Tensor& weight, const ConvOptions& opt,
                           const std::function<void(ConvKernel)>& run_forward) {
  const std::string policy = conv_kernel_policy();
  if (policy == "auto") return winograd_applies(x, weight, opt) ? ConvKernel::winograd : ConvKernel::im2col;
  if (policy == "measure") return measure(x, weight, opt, run_forward);
  for (ConvKernel k : {ConvKernel::im2col, ConvKernel::winograd, ConvKernel::onednn})
    if (policy == conv_kernel_name(k)) return conv_kernel_supports(k, x, weight, opt) ? k : ConvKernel::im2col;
  return ConvKernel::im2col;
}

std::vector<MeasuredConv> measured_conv_kernels() {
  Measured& m = measured();
  std::lock_guard lock(m.mutex);
  return m.log;
}

}  // namespace quartet::engine::cpu
