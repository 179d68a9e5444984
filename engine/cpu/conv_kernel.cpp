#include "engine/cpu/conv_kernel.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>

#include "engine/cpu/dnnl_conv.h"
#include "engine/cpu/winograd.h"
#include "engine/threads.h"

namespace quartet::engine::cpu {
namespace {

// "measure": each process for itself.
struct Measured {
  std::mutex mutex;
  std::map<std::string, ConvKernel> chosen;
  std::vector<KernelChoice> log;
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

ConvKernel by_rule(const Tensor& x, const Tensor& weight, const ConvOptions& opt) {
  return winograd_applies(x, weight, opt) ? ConvKernel::winograd : ConvKernel::im2col;
}

// The kernels that can run this conv, the rule's first.
std::vector<ConvKernel> candidates(const Tensor& x, const Tensor& weight, const ConvOptions& opt) {
  std::vector<ConvKernel> out{by_rule(x, weight, opt)};
  for (ConvKernel k : {ConvKernel::im2col, ConvKernel::winograd, ConvKernel::onednn})
    if (k != out.front() && conv_kernel_supports(k, x, weight, opt)) out.push_back(k);
  return out;
}

ConvKernel by_name(const std::string& name) {
  for (ConvKernel k : {ConvKernel::im2col, ConvKernel::winograd, ConvKernel::onednn})
    if (name == conv_kernel_name(k)) return k;
  return ConvKernel::im2col;
}

ConvKernel from_table(const Tensor& x, const Tensor& weight, const ConvOptions& opt,
                      const std::function<double(ConvKernel)>& time) {
  std::vector<std::string> names;
  for (ConvKernel k : candidates(x, weight, opt)) names.push_back(conv_kernel_name(k));
  std::function<double(const std::string&)> timed;
  if (time) timed = [&](const std::string& name) { return time(by_name(name)); };
  return by_name(cached_kernel("conv", shape_key(x, weight, opt), names, timed));
}

ConvKernel measure(const Tensor& x, const Tensor& weight, const ConvOptions& opt,
                   const std::function<double(ConvKernel)>& time) {
  const std::string shape = shape_key(x, weight, opt);
  Measured& m = measured();
  {
    std::lock_guard lock(m.mutex);
    if (auto it = m.chosen.find(shape); it != m.chosen.end()) return it->second;
  }
  if (!time) return by_rule(x, weight, opt);
  KernelChoice entry{"conv", shape, "", "measured here", {}};
  ConvKernel best = ConvKernel::im2col;
  double best_seconds = 0.0;
  for (ConvKernel k : candidates(x, weight, opt)) {
    const double fastest = fastest_run([&] { return time(k); });
    entry.seconds.emplace_back(conv_kernel_name(k), fastest);
    if (entry.seconds.size() == 1 || fastest < best_seconds) best = k, best_seconds = fastest;
  }
  entry.kernel = conv_kernel_name(best);
  std::lock_guard lock(m.mutex);
  // Another thread may have measured the same shape meanwhile: the first choice stays.
  const auto [it, first] = m.chosen.emplace(shape, best);
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
  if (p != "auto" && p != "rule" && p != "measure" && p != "im2col" && p != "winograd" && p != "onednn")
    throw std::invalid_argument("QUARTET_CONV_KERNEL: expected auto, rule, measure, im2col, winograd or onednn, got \"" +
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
                           const std::function<double(ConvKernel)>& time) {
  const std::string policy = conv_kernel_policy();
  if (policy == "auto") return from_table(x, weight, opt, time);
  if (policy == "rule") return by_rule(x, weight, opt);
  if (policy == "measure") return measure(x, weight, opt, time);
  const ConvKernel k = by_name(policy);
  return conv_kernel_supports(k, x, weight, opt) ? k : ConvKernel::im2col;
}

std::vector<KernelChoice> conv_kernel_choices() {
  std::vector<KernelChoice> out;
  for (KernelChoice& c : kernel_choices())
    if (c.op == "conv") out.push_back(std::move(c));
  Measured& m = measured();
  std::lock_guard lock(m.mutex);
  out.insert(out.end(), m.log.begin(), m.log.end());
  return out;
}

}  // namespace quartet::engine::cpu
