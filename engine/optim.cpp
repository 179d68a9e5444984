#include "engine/optim.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include "engine/autograd.h"
#include "engine/cpu/elementwise.h"
#include "engine/cpu/optim.h"
#include "engine/dispatch.h"

namespace quartet::engine {

namespace {

// Splits "<index>.<slot>" and checks the index; `what` names the optimizer in errors.
std::pair<size_t, std::string> parse_state_name(const std::string& name, size_t n_params, const char* what) {
  const size_t dot = name.find('.');
  size_t i = 0;
  try {
    size_t used = 0;
    i = std::stoul(name.substr(0, dot), &used);
    if (used != dot) throw std::invalid_argument("index");
  } catch (const std::exception&) {
    throw std::invalid_argument(std::string(what) + " state: unexpected entry \"" + name + "\"");
  }
  if (dot == std::string::npos || i >= n_params)
    throw std::invalid_argument(std::string(what) + " state: unexpected entry \"" + name + "\" (" +
                                std::to_string(n_params) + " parameters)");
  return {i, name.substr(dot + 1)};
}

// A copy of `t` on param's device, charged to optimizer state; requires param's shape.
Tensor copy_state(const Tensor& param, const Tensor& t, const std::string& what) {
  check_same_shape(param, t, what.c_str());
  Tensor out = Tensor::empty(t.shape(), param.device(), MemTag::optimizer_state);
  out.copy_from(t);
  return out;
}

}  // namespace

Optimizer::Optimizer(std::vector<Tensor> params, float lr) : params_(std::move(params)), lr_(lr) {
  if (!(lr >= 0.0f)) throw std::invalid_argument("optimizer: lr must be >= 0, got " + std::to_string(lr));
}

void Optimizer::zero_grad() {
  for (Tensor& p : params_) p.zero_grad();
}

SGD::SGD(std::vector<Tensor> params, SgdOptions opt)
    : Optimizer(std::move(params), opt.lr), opt_(opt), momentum_(params_.size()) {
  if (opt.momentum < 0.0f) throw std::invalid_argument("sgd: momentum must be >= 0");
  if (opt.weight_decay < 0.0f) throw std::invalid_argument("sgd: weight_decay must be >= 0");
  if (opt.nesterov && (opt.momentum <= 0.0f || opt.dampening != 0.0f))
    throw std::invalid_argument("sgd: nesterov needs momentum > 0 and dampening 0");
}

void SGD::step() {
  NoGradScope no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    const bool first = opt_.momentum != 0.0f && !momentum_[i].defined();
    if (first) momentum_[i] = Tensor::empty(p.shape(), p.device(), MemTag::optimizer_state);
    cpu::SgdStep s{lr_, opt_.momentum, opt_.dampening, opt_.nesterov, opt_.weight_decay, first};
    QUARTET_DISPATCH(p.device(), sgd_step, p, g, momentum_[i], s);
  }
}

NamedTensors SGD::state() const {
  NamedTensors out;
  for (size_t i = 0; i < momentum_.size(); ++i)
    if (momentum_[i].defined()) out.emplace_back(std::to_string(i) + ".momentum", momentum_[i]);
  return out;
}

void SGD::load_state(const NamedTensors& state) {
  std::vector<Tensor> loaded(params_.size());
  for (const auto& [name, t] : state) {
    const auto [i, slot] = parse_state_name(name, params_.size(), "sgd");
    if (slot != "momentum") throw std::invalid_argument("sgd state: unexpected entry \"" + name + "\"");
    loaded[i] = copy_state(params_[i], t, "sgd state " + name);
  }
  momentum_ = std::move(loaded);
}

Adam::Adam(std::vector<Tensor> params, AdamOptions opt) : Adam(std::move(params), opt, false, "adam") {}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions opt)
    : Adam(std::move(params), {opt.lr, opt.beta1, opt.beta2, opt.eps, opt.weight_decay}, true, "adamw") {}

Adam::Adam(std::vector<Tensor> params, AdamOptions opt, bool decoupled, const char* name)
    : Optimizer(std::move(params), opt.lr), opt_(opt), decoupled_(decoupled), name_(name),
      exp_avg_(params_.size()), exp_avg_sq_(params_.size()), steps_(params_.size(), 0) {
  auto refuse = [&](const char* what, float value, const char* range) {
    throw std::invalid_argument(std::string(name) + ": " + what + " must be " + range + ", got " +
                                std::to_string(value));
  };
  if (!(opt.beta1 >= 0.0f && opt.beta1 < 1.0f)) refuse("beta1", opt.beta1, "in [0, 1)");
  if (!(opt.beta2 >= 0.0f && opt.beta2 < 1.0f)) refuse("beta2", opt.beta2, "in [0, 1)");
  if (!(opt.eps >= 0.0f)) refuse("eps", opt.eps, ">= 0");
  if (!(opt.weight_decay >= 0.0f)) refuse("weight_decay", opt.weight_decay, ">= 0");
}

void Adam::step() {
  NoGradScope no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (!exp_avg_[i].defined()) {
      exp_avg_[i] = Tensor::empty(p.shape(), p.device(), MemTag::optimizer_state);
      exp_avg_sq_[i] = Tensor::empty(p.shape(), p.device(), MemTag::optimizer_state);
      exp_avg_[i].fill_(0.0f);
      exp_avg_sq_[i].fill_(0.0f);
    }
    const int64_t t = ++steps_[i];
    // Bias corrections in double, as PyTorch computes them on the host.
    const double bias1 = 1.0 - std::pow(static_cast<double>(opt_.beta1), static_cast<double>(t));
    const double bias2 = 1.0 - std::pow(static_cast<double>(opt_.beta2), static_cast<double>(t));
    const cpu::AdamStep s{lr_, opt_.beta1, opt_.beta2, opt_.eps, opt_.weight_decay, decoupled_,
                          static_cast<float>(lr_ / bias1), static_cast<float>(std::sqrt(bias2))};
    QUARTET_DISPATCH(p.device(), adam_step, p, g, exp_avg_[i], exp_avg_sq_[i], s);
  }
}

NamedTensors Adam::state() const {
  NamedTensors out;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!exp_avg_[i].defined()) continue;
    Tensor step = Tensor::empty({1}, Device::cpu(), MemTag::optimizer_state);
    step.fill_(static_cast<float>(steps_[i]));
    out.emplace_back(std::to_string(i) + ".exp_avg", exp_avg_[i]);
    out.emplace_back(std::to_string(i) + ".exp_avg_sq", exp_avg_sq_[i]);
    out.emplace_back(std::to_string(i) + ".step", step);
  }
  return out;
}

void Adam::load_state(const NamedTensors& state) {
  const std::string what = std::string(name_) + " state";
  std::vector<Tensor> avg(params_.size()), avg_sq(params_.size());
  std::vector<int64_t> steps(params_.size(), 0);
  for (const auto& [name, t] : state) {
    const auto [i, slot] = parse_state_name(name, params_.size(), name_);
    if (slot == "exp_avg") {
      avg[i] = copy_state(params_[i], t, what + " " + name);
    } else if (slot == "exp_avg_sq") {
      avg_sq[i] = copy_state(params_[i], t, what + " " + name);
    } else if (slot == "step") {
      // Steps travel as floats: whole numbers up to 2^24 are exact.
      const bool scalar = t.numel() == 1 && t.device().is_cpu();
      const float v = scalar ? t.item() : 0.0f;
      if (!(v >= 1.0f && v <= 16777216.0f && v == std::floor(v)))
        throw std::invalid_argument(what + " " + name + ": expected a [1] host tensor holding a whole step >= 1, got " +
                                    shape_str(t.shape()) + (scalar ? " = " + std::to_string(v) : std::string()));
      steps[i] = static_cast<int64_t>(v);
    } else {
      throw std::invalid_argument(what + ": unexpected entry \"" + name + "\"");
    }
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    const int present = avg[i].defined() + avg_sq[i].defined() + (steps[i] > 0);
    if (present != 0 && present != 3)
      throw std::invalid_argument(what + ": parameter " + std::to_string(i) +
                                  " needs all of exp_avg, exp_avg_sq and step, or none");
  }
  exp_avg_ = std::move(avg);
  exp_avg_sq_ = std::move(avg_sq);
  steps_ = std::move(steps);
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  double sq = 0.0;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    sq += sum_squares(g);
  }
  const double norm = std::sqrt(sq);
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) {
    for (const Tensor& p : params) {
      Tensor g = p.grad();
      if (g.defined()) scale_(g, static_cast<float>(coef));
    }
  }
  return norm;
}

}  // namespace quartet::engine
