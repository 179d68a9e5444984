#include "trainers/federated/privacy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <string>

#include "engine/random.h"
#include "workloads/sampler.h"

namespace quartet::trainers::federated {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

void check_shapes(const Params& a, const Params& b, const char* what) {
  bool same = a.size() == b.size();
  for (size_t t = 0; same && t < a.size(); ++t) same = a[t].size() == b[t].size();
  if (!same) throw std::invalid_argument(std::string(what) + ": the update is shaped unlike the global weights");
}

// log(exp(x) + exp(y)) without leaving log space.
double log_add(double x, double y) {
  const double hi = std::max(x, y), lo = std::min(x, y);
  if (lo == -kInf) return hi;
  return hi + std::log1p(std::exp(lo - hi));
}

// log(exp(x) - exp(y)); requires x >= y.
double log_sub(double x, double y) {
  if (x < y) throw std::domain_error("RDP accountant: a negative term in log space; the series did not converge");
  if (y == -kInf) return x;
  if (x == y) return -kInf;
  if (x - y > 700.0) return x;  // exp(y - x) is below double's resolution of 1
  return y + std::log(std::expm1(x - y));
}

// log(erfc(x)); past x = 25, erfc underflows towards subnormals, so the tail's series
// erfc(x) ~ exp(-x^2 - 1/(2x^2) + 5/(8x^4) - 37/(24x^6) + 353/(64x^8)) / (x sqrt(pi)).
double log_erfc(double x) {
  if (x <= 25.0) return std::log(std::erfc(x));
  const double x2 = x * x;
  return -0.5 * std::log(std::numbers::pi) - std::log(x) - x2 - 0.5 / x2 + 0.625 / (x2 * x2) -
         37.0 / 24.0 / (x2 * x2 * x2) + 353.0 / 64.0 / (x2 * x2 * x2 * x2);
}

// log A_alpha for integer alpha: log sum_i C(alpha, i) q^i (1-q)^(alpha-i) exp((i^2 - i) / (2 z^2)).
double log_a_integer(double q, double z, int64_t alpha) {
  const double a = static_cast<double>(alpha);
  double log_a = -kInf;
  for (int64_t k = 0; k <= alpha; ++k) {
    const double i = static_cast<double>(k);
    const double log_coef = std::lgamma(a + 1.0) - std::lgamma(i + 1.0) - std::lgamma(a - i + 1.0) +
                            i * std::log(q) + (a - i) * std::log1p(-q);
    log_a = log_add(log_a, log_coef + (i * i - i) / (2.0 * z * z));
  }
  return log_a;
}

// log A_alpha for fractional alpha: the two series of Mironov, Talwar and Zhang 2019
// (Section 3.3), split at z0, summed until both terms fall below e^-30.
double log_a_fractional(double q, double z, double alpha) {
  double log_a0 = -kInf, log_a1 = -kInf;
  const double z0 = z * z * std::log(1.0 / q - 1.0) + 0.5;
  double coef = 1.0;  // the generalised binomial C(alpha, i), whose sign alternates past alpha
  for (int64_t k = 0;; ++k) {
    if (k > 100000) throw std::domain_error("RDP accountant: the fractional-order series did not converge");
    const double i = static_cast<double>(k), j = alpha - i;
    const double log_coef = std::log(std::abs(coef));
    const double log_t0 = log_coef + i * std::log(q) + j * std::log1p(-q);
    const double log_t1 = log_coef + j * std::log(q) + i * std::log1p(-q);
    const double log_e0 = std::log(0.5) + log_erfc((i - z0) / (std::numbers::sqrt2 * z));
    const double log_e1 = std::log(0.5) + log_erfc((z0 - j) / (std::numbers::sqrt2 * z));
    const double log_s0 = log_t0 + (i * i - i) / (2.0 * z * z) + log_e0;
    const double log_s1 = log_t1 + (j * j - j) / (2.0 * z * z) + log_e1;
    if (coef > 0) {
      log_a0 = log_add(log_a0, log_s0);
      log_a1 = log_add(log_a1, log_s1);
    } else {
      log_a0 = log_sub(log_a0, log_s0);
      log_a1 = log_sub(log_a1, log_s1);
    }
    if (std::max(log_s0, log_s1) < -30.0) break;
    coef *= (alpha - i) / (i + 1.0);
  }
  return log_add(log_a0, log_a1);
}

}  // namespace

double clip_update(Params& weights, const Params& global, double clip) {
  check_shapes(weights, global, "clip_update");
  if (!(clip > 0.0)) throw std::invalid_argument("clip_update: the clip must be > 0");
  double sq = 0.0;
  for (size_t t = 0; t < global.size(); ++t)
    for (size_t k = 0; k < global[t].size(); ++k) {
      const double d = static_cast<double>(weights[t][k]) - global[t][k];
      sq += d * d;
    }
  const double norm = std::sqrt(sq);
  if (norm <= clip) return norm;
  const double scale = clip / norm;
  for (size_t t = 0; t < global.size(); ++t)
    for (size_t k = 0; k < global[t].size(); ++k) {
      const double d = static_cast<double>(weights[t][k]) - global[t][k];
      weights[t][k] = static_cast<float>(global[t][k] + d * scale);
    }
  return norm;
}

void add_gaussian_noise(Params& params, double stddev, uint64_t seed, int64_t round) {
  if (stddev == 0.0) return;
  // A stream of its own: 0xd1ff... keeps it apart from client sampling and the shuffles.
  engine::Generator gen(
      workloads::mix_seed(workloads::mix_seed(seed ^ 0xd1ff5eed0a15eULL) ^ static_cast<uint64_t>(round)));
  for (std::vector<float>& t : params)
    for (float& v : t) v = static_cast<float>(v + stddev * static_cast<double>(gen.normal(0.0f, 1.0f)));
}

std::vector<double> default_rdp_orders() {
  std::vector<double> orders;
  for (int x = 1; x < 100; ++x) orders.push_back(1.0 + x / 10.0);
  for (int a = 12; a < 64; ++a) orders.push_back(a);
  for (double a : {128.0, 256.0, 512.0}) orders.push_back(a);
  return orders;
}

double rdp_sampled_gaussian(double q, double z, double order) {
  if (!(q >= 0.0 && q <= 1.0)) throw std::invalid_argument("RDP accountant: the sampling rate must be in [0, 1]");
  if (!(order > 1.0)) throw std::invalid_argument("RDP accountant: orders must be > 1");
  if (q == 0.0) return 0.0;
  if (z == 0.0) return kInf;
  if (q == 1.0) return order / (2.0 * z * z);
  if (std::isinf(order)) return kInf;
  const double log_a = order == std::floor(order) ? log_a_integer(q, z, static_cast<int64_t>(order))
                                                   : log_a_fractional(q, z, order);
  return log_a / (order - 1.0);
}

std::vector<double> compute_rdp(double q, double z, int64_t steps, std::span<const double> orders) {
  std::vector<double> rdp;
  for (double a : orders) rdp.push_back(rdp_sampled_gaussian(q, z, a) * static_cast<double>(steps));
  return rdp;
}

PrivacySpent privacy_spent(std::span<const double> orders, std::span<const double> rdp, double delta,
                           RdpConversion conversion) {
  if (orders.size() != rdp.size() || orders.empty())
    throw std::invalid_argument("privacy_spent: orders and RDP values differ in number or are none");
  if (!(delta > 0.0 && delta < 1.0)) throw std::invalid_argument("privacy_spent: delta must be in (0, 1)");
  PrivacySpent best{kInf, orders.front()};
  for (size_t i = 0; i < orders.size(); ++i) {
    const double a = orders[i];
    const double eps = conversion == RdpConversion::classic
                           ? rdp[i] - std::log(delta) / (a - 1.0)
                           : rdp[i] - (std::log(delta) + std::log(a)) / (a - 1.0) + std::log((a - 1.0) / a);
    if (eps < best.epsilon) best = {eps, a};
  }
  best.epsilon = std::max(best.epsilon, 0.0);  // a bound below 0 says no more than 0 does
  return best;
}

DpFedAvg::DpFedAvg(DpConfig config, int64_t clients, int64_t clients_per_round, uint64_t seed)
    : config_(config),
      q_(static_cast<double>(clients_per_round) / static_cast<double>(clients)),
      seed_(seed),
      orders_(default_rdp_orders()) {
  if (enabled() && config_.noise_multiplier > 0.0)
    rdp_per_round_ = compute_rdp(q_, config_.noise_multiplier, 1, orders_);
}

int64_t DpFedAvg::admit(Params& weights, const Params& global, int64_t samples) {
  if (!enabled()) return samples;
  norms_.push_back(clip_update(weights, global, config_.clip));
  return 1;
}

void DpFedAvg::release(Params& mean, int64_t round, int64_t averaged) {
  if (!enabled()) return;
  noise_std_ = config_.noise_multiplier * config_.clip / static_cast<double>(averaged);
  add_gaussian_noise(mean, noise_std_, seed_, round);
  ++rounds_;
}

double DpFedAvg::epsilon(int64_t rounds) const {
  if (rdp_per_round_.empty()) return kInf;
  if (rounds == 0) return 0.0;
  std::vector<double> rdp = rdp_per_round_;
  for (double& r : rdp) r *= static_cast<double>(rounds);
  return privacy_spent(orders_, rdp, config_.delta).epsilon;
}

nlohmann::json DpFedAvg::record() {
  const int64_t clipped = std::count_if(norms_.begin(), norms_.end(), [&](double n) { return n > config_.clip; });
  nlohmann::json median = nullptr;
  if (!norms_.empty()) {
    std::nth_element(norms_.begin(), norms_.begin() + norms_.size() / 2, norms_.end());
    median = norms_[norms_.size() / 2];
  }
  const double eps = epsilon(rounds_);
  nlohmann::json r = {{"clip", config_.clip},
                      {"noise_multiplier", config_.noise_multiplier},
                      {"noise_std", noise_std_},
                      {"sampling_rate", q_},
                      {"clipped", clipped},
                      {"update_norm_median", median},
                      {"rounds", rounds_},
                      {"epsilon", std::isinf(eps) ? nlohmann::json(nullptr) : nlohmann::json(eps)},
                      {"delta", config_.delta}};
  norms_.clear();
  noise_std_ = 0.0;
  return r;
}

}  // namespace quartet::trainers::federated
