#pragma once

// Client-level differential privacy for the federated regime: DP-FedAvg (McMahan et al.
// 2018, "Learning Differentially Private Recurrent Language Models") with the server-side
// fixed clipping of Flower's DifferentialPrivacyServerSideFixedClipping, and an RDP
// accountant for the sampled Gaussian mechanism (Mironov 2017; Mironov, Talwar and Zhang
// 2019), the computation of TensorFlow Privacy's compute_rdp and Opacus' analysis/rdp.py.
// docs/federated.md, "Differential privacy".

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <vector>

#include "trainers/federated/strategy.h"

namespace quartet::trainers::federated {

// Clips the update weights - global to L2 norm <= clip, over every value of every tensor
// (batch-norm running statistics too: they are computed from the client's data, so the
// guarantee needs them bounded like the weights), by moving weights to global + delta *
// min(1, clip / norm). requires weights shaped as global, clip > 0.
// ensures the norm before clipping is returned; an update within the bound is unchanged
// throws std::invalid_argument when the shapes differ
double clip_update(Params& weights, const Params& global, double clip);

// Adds N(0, stddev^2) to every value, from a generator seeded by (seed, round) alone, so a
// resumed or repeated run adds the same noise. stddev 0 leaves params unchanged.
void add_gaussian_noise(Params& params, double stddev, uint64_t seed, int64_t round);

// Opacus' DEFAULT_ALPHAS (1.1, 1.2, ..., 10.9, 12, ..., 63) and TensorFlow Privacy's
// 128, 256, 512 for small sampling rates and many steps.
std::vector<double> default_rdp_orders();

// RDP of one step of the sampled Gaussian mechanism at `order` > 1: sampling rate q in
// [0, 1], noise multiplier z (noise std / sensitivity). q = 1: order / (2 z^2); integer
// orders by the binomial sum, fractional ones by the two-sided series of Mironov et al.
// 2019 (Section 3.3), both in log space. z = 0: infinity.
double rdp_sampled_gaussian(double q, double noise_multiplier, double order);

// The RDP of `steps` compositions at each order.
std::vector<double> compute_rdp(double q, double noise_multiplier, int64_t steps, std::span<const double> orders);

// How an RDP curve becomes (epsilon, delta)-DP at the best order:
// improved: eps = rdp - (log delta + log order) / (order - 1) + log((order - 1) / order)
//   (Balle et al. 2020, Prop. 12; Opacus' get_privacy_spent, TensorFlow Privacy since 2021);
// classic:  eps = rdp - log delta / (order - 1) (Mironov 2017, Prop. 3).
enum class RdpConversion { improved, classic };

struct PrivacySpent {
  double epsilon = 0.0;  // infinity when every order's is
  double order = 0.0;    // the order that gave it
};

// requires orders and rdp of equal length, orders > 1, 0 < delta < 1
PrivacySpent privacy_spent(std::span<const double> orders, std::span<const double> rdp, double delta,
                           RdpConversion conversion = RdpConversion::improved);

// An arm's DP settings (federated::Settings holds their defaults and checks).
struct DpConfig {
  double clip = 0.0;              // S; 0: no DP
  double noise_multiplier = 0.0;  // z; 0 with a clip: clipping only, no guarantee
  double delta = 1e-5;
};

// The server's side of DP-FedAvg over an arm's rounds: clips each update as it arrives,
// averages the clipped updates unweighted, adds N(0, (z S / n)^2) to the mean of n, and
// accounts the rounds released with q = clients per round / clients.
class DpFedAvg {
 public:
  DpFedAvg(DpConfig config, int64_t clients, int64_t clients_per_round, uint64_t seed);
  bool enabled() const { return config_.clip > 0.0; }
  // Clips weights against global (enabled only) and returns the weight to average them
  // with: 1 with DP (unweighted, so one client moves the mean by at most S / n), else
  // samples.
  int64_t admit(Params& weights, const Params& global, int64_t samples);
  // Noises the round's mean of `averaged` clipped updates and counts the round; resets
  // the round's clipping figures after record() has read them.
  void release(Params& mean, int64_t round, int64_t averaged);
  // The round record's "privacy": clip, noise_multiplier, noise_std, sampling_rate,
  // clipped (updates over S), update_norm_median, rounds (released so far), epsilon
  // (null without noise), delta. Then starts the next round's figures.
  nlohmann::json record();
  // Rounds released before a resume (the checkpoint's).
  int64_t rounds() const { return rounds_; }
  void resume(int64_t rounds) { rounds_ = rounds; }
  // Epsilon after `rounds` releases at the arm's delta; infinity without noise.
  double epsilon(int64_t rounds) const;

 private:
  DpConfig config_;
  double q_;
  uint64_t seed_;
  std::vector<double> orders_, rdp_per_round_;
  int64_t rounds_ = 0;
  std::vector<double> norms_;  // this round's update norms before clipping
  double noise_std_ = 0.0;
};

}  // namespace quartet::trainers::federated
