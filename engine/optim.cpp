#include "engine/optim.h"

#include <cmath>
#include <stdexcept>

#include "engine/autograd.h"
#include "engine/cpu/elementwise.h"
#include "engine/cpu/optim.h"
#include "engine/dispatch.h"

namespace quartet::engine {

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
    size_t dot = name.find('.');
    size_t i = 0;
    try {
      i = std::stoul(name.substr(0, dot));
    } catch (const std::exception&) {
      throw std::invalid_argument("sgd state: unexpected entry \"" + name + "\"");
    }
    if (dot == std::string::npos || name.substr(dot + 1) != "momentum" || i >= params_.size())
      throw std::invalid_argument("sgd state: unexpected entry \"" + name + "\"");
    check_same_shape(params_[i], t, ("sgd state " + name).c_str());
    loaded[i] = Tensor::empty(t.shape(), params_[i].device(), MemTag::optimizer_state);
    loaded[i].copy_from(t);
  }
  momentum_ = std::move(loaded);
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  double sq = 0.0;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (!g.device().is_cpu()) throw_no_backend(g.device(), "clip_grad_norm");
    sq += cpu::sum_squares(g);
  }
  const double norm = std::sqrt(sq);
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) {
    for (const Tensor& p : params) {
      Tensor g = p.grad();
      if (g.defined()) QUARTET_DISPATCH(g.device(), scale, g, static_cast<float>(coef), g);
    }
  }
  return norm;
}

}  // namespace quartet::engine
